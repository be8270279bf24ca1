"""The compiled datapath on a real GPU: the same checks as the interpreter's
(every collective, strategy and dtype at several rank counts, in place,
reductions, split launches, graph replays, the watchdog), with
kernel=compiled. Marked `gpu`."""

from __future__ import annotations

import pytest

from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import CapacityError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES
from tests.gpu.test_gpu_executor import (
    PerRanks,
    _check as _check_any,
    assert_watchdog_names_the_starved_wait,
    ring_without_its_last_notify,
)

# The built-ins of fixed sizes (sizes per call: the GPU phase of issue 31).
FIXED = [s for s in load_all_builtin() if not s.variable]

pytestmark = pytest.mark.gpu
COMPILED = {"kernel": "compiled"}


def _check(
    executor, spec, ranks, count, dtype, strategy, root=0, inplace=False, redop=None, params=None, exec_params=COMPILED
):
    """The interpreter tests' check, where the program fits one compiled
    launch; past the build bound (a ring reduce-scatter over 8 ranks: 736
    ops, a minute or two of NVRTC) the refusal must come, with the way out,
    before any build. Split launches are lowered as the runner lowers them."""
    _, np_dtype = resolve_dtype(dtype)
    inst = instantiate(spec, ranks, count, np_dtype.itemsize, root)
    program = derive_program(inst, strategy, dtype, redop, params or {}, inplace)
    split = bool(executor.options.get("split_launches"))
    launches = [[r] for r in range(ranks)] if split else [list(range(ranks))]
    if max(build_weight(lower(program, held, not split, "sm", flag_id)) for held in launches) <= MAX_BUILD_WEIGHT:
        _check_any(executor, spec, ranks, count, dtype, strategy, root, inplace, redop, params, exec_params)
        return
    with pytest.raises(CapacityError, match="kernel=interpreted"):
        executor.prepare(program, **exec_params)


@pytest.fixture(scope="module")
def executor():
    return PerRanks(timeout_s=5.0)


# Every program is a new source and NVRTC takes about a second a source on a
# fresh machine (then CuPy's disk cache), so this samples: every collective
# and strategy at 8 ranks, one dtype per rank count, the odd counts that
# take the scalar edges.
@pytest.mark.parametrize("spec", FIXED, ids=lambda s: s.name)
def test_every_strategy_matches_the_reference(executor, spec):
    for ranks, dtype, count in ((8, "float32", 65536 + 3), (3, "bfloat16", 1001), (2, "int32", 1)):
        root = ranks - 1 if spec.rooted else 0
        for strategy in STRATEGIES:
            _check(executor, spec, ranks, count, dtype, strategy, root, exec_params=COMPILED)


def test_reductions_and_in_place(executor):
    for name, redop in (("all-reduce", "max"), ("reduce-scatter", "prod"), ("reduce", "min")):
        for strategy in STRATEGIES:
            _check(executor, load_builtin(name), 8, 3001, "float16", strategy, redop=redop, exec_params=COMPILED)
            _check(executor, load_builtin(name), 8, 4099, "float32", strategy, inplace=True, exec_params=COMPILED)


@pytest.mark.parametrize(
    "exec_params", [{"blocks": 1, "threads": 128, "unroll": 1}, {"blocks": 8, "unroll": 4}, {"datapath": "ce"}]
)
def test_with_datapath_parameters(executor, exec_params):
    for name in ("all-reduce", "broadcast"):
        for strategy in STRATEGIES:
            inst = instantiate(load_builtin(name), 8, 12345, 4)
            program = derive_program(inst, strategy, "float32", None, {"channels": 2})
            if exec_params.get("datapath") == "ce" and program.parity_scratch:
                # Copy engines cannot move a scratch base by the call's epoch:
                # refused before any build, with the way out (H100, session 18:
                # this test predated push-parity and failed here).
                with pytest.raises(CapacityError, match="kernel=compiled, datapath=sm"):
                    executor.prepare(program, **exec_params, **COMPILED)
                continue
            _check(
                executor,
                load_builtin(name),
                8,
                12345,
                "float32",
                strategy,
                params={"channels": 2},
                exec_params={**exec_params, **COMPILED},
            )


def test_split_launches_keep_the_call_protocol():
    split = PerRanks(split_launches=True, timeout_s=5.0)
    for name in ("all-reduce", "all-to-all"):
        for strategy in STRATEGIES:
            _check(split, load_builtin(name), 4, 1001, "float32", strategy, exec_params=COMPILED)


def test_jitter_keeps_every_result():
    """The test mode's random delays per block and step (PURLIN_JITTER):
    every collective and strategy stays exact, in one fused launch and in a
    launch per rank (the process path's protocol), so a race in either
    would show here on one GPU."""
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    shaken = KernelSettings(jitter_ns=4000, jitter_seed=11)
    fused, split = (
        PerRanks(timeout_s=5.0, settings=shaken),
        PerRanks(timeout_s=5.0, settings=shaken, split_launches=True),
    )
    for spec in FIXED:
        root = 3 if spec.rooted else 0
        for strategy in STRATEGIES:
            _check(fused, spec, 8, 4099, "float32", strategy, root, exec_params=COMPILED)
            _check(split, spec, 4, 1001, "bfloat16", strategy, root, exec_params=COMPILED)


def test_a_missing_notify_is_a_watchdog_naming_rank_step_and_flag():
    """As the interpreter's test: drop the notify of a ring's last hop; the
    compiled kernel's watchdog names exactly its consumer's rank, step and flag."""
    _, _, broken, dropped, waiter = ring_without_its_last_notify()
    assert_watchdog_names_the_starved_wait(PerRanks(timeout_s=0.5).prepare(broken, **COMPILED), broken, dropped, waiter)


def test_graph_replays_and_compile_time_are_recorded():
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.backends.port import TimingPolicy
    from purlin_bench.base.config import RunConfig
    from purlin_bench.measure.service import MeasurementService
    from purlin_bench.spec import instantiate

    service = MeasurementService(CupyBackend(8, timeout_s=5.0))
    inst = instantiate(load_builtin("all-reduce"), 8, 4096, 4)
    configs = {"interpreted": RunConfig.make("two-shot", {}, {}), "compiled": RunConfig.make("two-shot", {}, COMPILED)}
    result = service.compare(inst, configs, "float32", "sum", policy=TimingPolicy(iters=20, warmup=2, reps=3))
    assert result.nwrong == {"interpreted": 0, "compiled": 0}
    assert all(t.median_us > 0 for t in result.times.values())
    prepared = service.prepare(inst, configs["compiled"], "float32", "sum")
    assert prepared.runner.build_s >= 0.0
