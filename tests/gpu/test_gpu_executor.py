"""The CuPy executor on a real GPU: every collective, strategy, dtype and rank
count against the reference; graph replays; the watchdog; split launches and
copy engines. Marked `gpu`: skipped cleanly where no GPU is usable."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from purlin_bench.backends.port import run_once
from purlin_bench.base.config import RunConfig
from purlin_bench.measure.compare import check_program, compare
from purlin_bench.base.dtypes import random_inputs, resolve_dtype
from purlin_bench.base.errors import ExecutionError, WatchdogTimeout
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Notify
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES

pytestmark = pytest.mark.gpu

SPECS = [s for s in load_all_builtin() if not s.variable]  # -v: the GPU phase of issue 31


class PerRanks:
    """The cupy backend for whatever rank count a program has (a backend
    instance is bound to one rank layout)."""

    def __init__(self, **options):
        self.options, self.backends = options, {}

    def prepare(self, program, **params):
        from purlin_bench.backends.cupy import CupyBackend

        if program.ranks not in self.backends:
            self.backends[program.ranks] = CupyBackend(program.ranks, **self.options)
        return self.backends[program.ranks].prepare(program, **params)


@pytest.fixture(scope="module")
def executor():
    return PerRanks(timeout_s=5.0)


def _check(
    executor, spec, ranks, count, dtype, strategy, root=0, inplace=False, redop=None, params=None, exec_params=None
):
    _, np_dtype = resolve_dtype(dtype)
    inst = instantiate(spec, ranks, count, np_dtype.itemsize, root)
    program = derive_program(inst, strategy, dtype, redop, params or {}, inplace)
    runner = executor.prepare(program, **(exec_params or {}))
    result = check_program(inst, program, runner, seed=count + ranks, calls=2)
    assert result.wrong == 0, (
        f"{spec.name} R={ranks} count={count} {dtype} {strategy} root={root} inplace={inplace}: {result}"
    )


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_every_strategy_rank_count_and_root(executor, spec, dtype):
    for ranks in (1, 2, 3, 5, 8):
        roots = range(ranks) if spec.rooted and ranks <= 3 else ({0, ranks - 1} if spec.rooted else {0})
        for root in roots:
            for count in (1, 1001, 65536 + 3):
                for strategy in STRATEGIES:
                    _check(executor, spec, ranks, count, dtype, strategy, root)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.name != "all-to-all"], ids=lambda s: s.name)
def test_in_place(executor, spec):
    for strategy in STRATEGIES:
        _check(executor, spec, 8, 4099, "float32", strategy, root=3 if spec.rooted else 0, inplace=True)


@pytest.mark.parametrize("redop", ["prod", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_reduction_ops(executor, redop, dtype):
    for name in ("all-reduce", "reduce-scatter", "reduce"):
        for strategy in ("direct", "push", "two-shot", "ring"):
            _check(executor, load_builtin(name), 8, 3001, dtype, strategy, redop=redop)


def test_large_counts(executor):
    """64 Mi elements per rank, the upper end of the required range: exact
    inputs checked on the device (a host reference over GiBs takes minutes)."""
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.measure.service import MeasurementService

    service = MeasurementService(CupyBackend(8, timeout_s=5.0))
    big = 64 * 1024 * 1024
    for name, count, dtype, strategy, params in (
        ("all-reduce", big, "float32", "two-shot", {}),
        ("all-reduce", big + 5, "bfloat16", "ring", {"channels": 2}),
        ("all-gather", big // 8, "float32", "push", {}),
    ):
        inst = instantiate(load_builtin(name), 8, count, resolve_dtype(dtype)[1].itemsize)
        result = service.check(inst, RunConfig.make(strategy, params), dtype, calls=1)
        assert result.wrong == 0, f"{name} {count} {dtype} {strategy}: {result}"


@pytest.mark.parametrize(
    "exec_params",
    [{"blocks": 1, "threads": 128, "unroll": 1}, {"blocks": 8, "threads": 512, "unroll": 4}, {"datapath": "ce"}],
)
def test_datapath_parameters(executor, exec_params):
    for name in ("all-reduce", "all-gather", "all-to-all", "broadcast"):
        spec = load_builtin(name)
        for strategy in ("direct", "push", "two-shot", "ring"):
            _check(executor, spec, 8, 12345, "float32", strategy, params={"channels": 2}, exec_params=exec_params)


@pytest.mark.parametrize(
    "exec_params",
    [{"blocks": 1, "threads": 128, "unroll": 1}, {"blocks": 4, "unroll": 4}],
    ids=["1x128-u1", "4x512-u4"],
)
def test_jitter_keeps_the_interpreter_exact(exec_params):
    """The interpreter with the test mode's random delays per block and step,
    fused and one launch per rank, copies and reductions, in and out of place."""
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    shaken = KernelSettings(jitter_ns=4000, jitter_seed=3)
    for executor in (
        PerRanks(timeout_s=5.0, settings=shaken),
        PerRanks(timeout_s=5.0, settings=shaken, split_launches=True),
    ):
        for name, strategy in (
            ("all-gather", "push"),
            ("broadcast", "two-shot"),
            ("all-to-all", "ring"),
            ("reduce-scatter", "ring"),
            ("all-reduce", "two-shot"),
        ):
            for count in (1, 1001, 65539):
                _check(executor, load_builtin(name), 4, count, "float32", strategy, exec_params=exec_params)
            _check(
                executor,
                load_builtin(name),
                3,
                70001,
                "bfloat16",
                strategy,
                inplace=name != "all-to-all",
                exec_params=exec_params,
            )


def test_split_launches_run_the_multi_gpu_protocol():
    """One launch per rank on one GPU: ready/done flags stay in the kernel."""
    split = PerRanks(split_launches=True, timeout_s=5.0)
    for name in ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all"):
        for strategy in STRATEGIES:
            _check(
                split,
                load_builtin(name),
                4,
                999,
                "float32",
                strategy,
                params={"channels": 2},
                exec_params={"blocks": 2},
            )


def test_graph_replays_stay_correct(executor):
    """A captured call replayed 1,000 times, fresh inputs before every replay."""
    import cupy

    spec = load_builtin("all-reduce")
    inst = instantiate(spec, 8, 4096 + 7, 4)
    for strategy in ("push", "ring"):
        program = derive_program(inst, strategy, "float32")
        runner = executor.prepare(program)
        stream = runner.main_stream()
        with cupy.cuda.Device(0):
            stream.begin_capture()
            runner.launch(stream)
            graph = stream.end_capture()
            rng = np.random.default_rng(7)
            for replay in range(1000):
                inputs = random_inputs(rng, program.in_counts, np.dtype(np.float32), "sum")
                runner.load(inputs)
                graph.launch(stream)
                stream.synchronize()
                runner.check_status()
                result = compare(inst, program, inputs, runner.outputs())
                assert result.wrong == 0, f"{strategy}: replay {replay} wrong: {result}"


def test_a_runner_keeps_its_buffers_when_a_later_one_needs_them_larger():
    """A ring all-reduce's scratch is smaller than push's: preparing push in
    the same world replaces the scratch buffers. The ring runner must still
    run correctly, on memory no one else was handed (a freed block would go
    to the next allocation of that size, here ``bystander``)."""
    import cupy

    executor = PerRanks(timeout_s=5.0)
    inst = instantiate(load_builtin("all-reduce"), 4, 4096, 4)
    ring = executor.prepare(derive_program(inst, "ring", "float32"))
    scratch = ring.array(0, "scratch")
    executor.prepare(derive_program(inst, "push", "float32"))
    assert ring.program.scratch_count < derive_program(inst, "push", "float32").scratch_count
    with cupy.cuda.Device(0):
        bystander = cupy.full(scratch.size, 7, dtype=cupy.float32)
    result = check_program(inst, ring.program, ring, seed=3, calls=2)
    assert result.wrong == 0, result
    assert int((bystander != 7).sum()) == 0, "the ring runner wrote into memory it had given back"


def ring_without_its_last_notify():
    """A 4-rank ring all-gather with the notify of its last hop dropped: only
    that hop's consumer starves. The good program, the broken one, the
    dropped notify, and (rank, channel, step) of the wait that starves."""
    inst = instantiate(load_builtin("all-gather"), 4, 10000, 4)
    program = derive_program(inst, "ring", "float32")
    lists = [[list(steps) for steps in chans] for chans in program.lists]
    final_waits = {
        s.waits[0]: (r, c, i)
        for r, chans in enumerate(lists)
        for c, steps in enumerate(chans)
        for i, s in enumerate(steps)
        if getattr(s, "op", None) == "wait" and len(s.waits) == 1
    }
    rank, channel, index = next(
        (r, c, i)
        for r, chans in enumerate(lists)
        for c, steps in enumerate(chans)
        for i, s in enumerate(steps)
        if isinstance(s, Notify) and s.role == "data" and s.flag in final_waits
    )
    dropped = lists[rank][channel].pop(index)
    broken = dataclasses.replace(program, lists=tuple(tuple(tuple(s) for s in chans) for chans in lists))
    return inst, program, broken, dropped, final_waits[dropped.flag]


def assert_watchdog_names_the_starved_wait(runner, broken, dropped, waiter) -> None:
    with pytest.raises(WatchdogTimeout) as err:
        run_once(runner, random_inputs(np.random.default_rng(0), broken.in_counts, np.dtype(np.float32), None))
    message = str(err.value)
    assert f"rank {waiter[0]} channel {waiter[1]} step {waiter[2]} " in message, message
    assert dropped.flag.text() in message, message


def test_missing_notify_times_out_and_names_the_wait(executor):
    """Drop the notify of a ring's last hop: only its consumer starves, so the
    watchdog must name exactly that rank, step and flag, and leave the process
    able to run the next collective."""
    spec = load_builtin("all-gather")
    inst, program, broken, dropped, waiter = ring_without_its_last_notify()
    short = PerRanks(timeout_s=0.5)
    assert_watchdog_names_the_starved_wait(short.prepare(broken), broken, dropped, waiter)
    # The same executor runs a correct program right after, and so does the runner once reset.
    good = short.prepare(program)
    assert check_program(inst, program, good).wrong == 0
    _check(executor, spec, 4, 10000, "float32", "ring")


def test_launch_that_cannot_be_coresident_is_refused(executor):
    inst = instantiate(load_builtin("all-reduce"), 8, 1 << 20, 4)
    program = derive_program(inst, "direct", "float32", params={"channels": 16})
    with pytest.raises(ExecutionError, match="could deadlock"):
        executor.prepare(program, blocks=32, threads=512)


def test_blocks_are_a_ceiling_set_by_what_the_data_can_use(executor):
    spec = load_builtin("all-reduce")
    small = instantiate(spec, 8, 1024, 4)  # two-shot: 128 floats (32 vectors) per op
    program = derive_program(small, "two-shot", "float32")
    runner = executor.prepare(program, blocks=32, threads=256)
    assert runner.blocks == 1 and runner.launches[0].grid == 8
    assert check_program(small, program, runner, seed=1, calls=2).wrong == 0
    # 2,048 floats per op (8 sources, 8 destinations): one block has a vector
    # per thread, but the automatic count (bytes read and written / 8 KiB,
    # at most what fits: 16 on a 132-SM H200) stays allowed
    mid = derive_program(instantiate(spec, 8, 1 << 14, 4), "two-shot", "float32")
    auto = executor.prepare(mid).blocks
    assert 4 < auto < 32
    assert executor.prepare(mid, blocks=32).blocks == auto and executor.prepare(mid, blocks=4).blocks == 4
    large = instantiate(spec, 8, 1 << 20, 4)
    assert executor.prepare(derive_program(large, "two-shot", "float32"), blocks=32, threads=256).blocks == 32
