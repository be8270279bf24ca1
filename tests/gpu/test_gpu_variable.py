"""Variable-length collectives on the GPU (issue 31): one prepared runner
serves every call's counts, read by the kernel from device memory; a count
a GPU wrote out of range is clamped and reported, never used; a captured
graph replays with new counts written on the stream. Marked `gpu`."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.measure.compare import count_wrong
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.base.errors import CountsError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts, expected_outputs
from purlin_bench.strategies import STRATEGIES

pytestmark = pytest.mark.gpu

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")


@pytest.fixture(scope="module")
def backends():
    from purlin_bench.backends.cupy import CupyBackend

    made = {}

    def of(ranks: int):
        if ranks not in made:
            made[ranks] = CupyBackend(ranks, timeout_s=5.0)
        return made[ranks]

    return of


def _setup(backends, name, ranks, cap, dtype, strategy, **params):
    _, np_dtype = resolve_dtype(dtype)
    inst = instantiate(load_builtin(name), ranks, cap, np_dtype.itemsize)
    redop = "sum" if inst.op == "reduce" else None
    program = derive_program(inst, strategy, dtype, redop)
    runner = backends(ranks).prepare(program, sets=2, **params)
    # Exact small integers: sums in any order are the reference's, bit for bit.
    inputs = exact_inputs(program.in_counts, np_dtype, program.redop, ranks)
    return inst, redop, runner, inputs


def _wrong(inst, redop, inputs, outputs, counts) -> int:
    expected = expected_outputs(inst, inputs, redop, counts)
    return sum(count_wrong(a[: len(b)], b, None) for a, b in zip(outputs, expected))


@pytest.mark.parametrize("name", VARIABLE)
@pytest.mark.parametrize("ranks", (1, 2, 3, 8, 9))
@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_every_strategy_serves_every_calls_counts(backends, name, ranks, dtype):
    rng = np.random.default_rng(7 * ranks)
    for strategy in STRATEGIES:
        inst, redop, runner, inputs = _setup(backends, name, ranks, 1001, dtype, strategy)
        try:
            k = len(inst.count_keys)
            calls = [(0,) * k, (inst.count,) * k, *(draw_counts(inst, d, rng) for d in DISTRIBUTIONS)]
            for i, counts in enumerate(calls):
                slot = i % 2
                runner.load(inputs, slot, counts)
                runner.run(slot)
                assert _wrong(inst, redop, inputs, runner.outputs(slot), counts) == 0, (strategy, counts)
        finally:
            runner.close()


def test_a_count_out_of_range_on_the_device_is_clamped_and_raised(backends):
    import cupy

    inst, redop, runner, inputs = _setup(backends, "all-to-all-v", 4, 64, "float32", "direct")
    try:
        counts = draw_counts(inst, "uniform", np.random.default_rng(1))
        runner.load(inputs, 0, counts)
        bad = np.array(counts, dtype=np.int64)
        bad[5] = 10**12  # what a routing kernel's bug could write
        cupy.cuda.runtime.memcpy(runner.counts_address(0), bad.ctypes.data, bad.nbytes, 1)  # host to device
        with pytest.raises(CountsError, match=r"count 5 .* was 1000000000000 in device memory, outside 0\.\.64"):
            runner.run(0)
        runner.load(inputs, 0, counts)  # the runner goes on: the next call is sound
        runner.run(0)
        assert _wrong(inst, redop, inputs, runner.outputs(0), counts) == 0
    finally:
        runner.close()


@pytest.mark.parametrize("name", VARIABLE)
def test_a_captured_graph_replays_with_counts_written_on_its_stream(backends, name):
    import cupy

    inst, redop, runner, inputs = _setup(backends, name, 8, 4096, "float32", "direct")
    try:
        rng = np.random.default_rng(3)
        runner.load(inputs, 0, (0,) * len(inst.count_keys))
        staged = cupy.zeros(len(inst.count_keys), dtype=cupy.int64)  # where a routing kernel writes
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            cupy.cuda.runtime.memcpyAsync(runner.counts_address(0), staged.data.ptr, staged.nbytes, 3, stream.ptr)
            runner.launch(stream, 0)
            graph = stream.end_capture()
        for _ in range(6):
            counts = draw_counts(inst, str(rng.choice(DISTRIBUTIONS)), rng)
            with stream:
                staged.set(np.array(counts, dtype=np.int64), stream=stream)
                runner.poison(0)
                graph.launch(stream)
            stream.synchronize()
            runner.check_status()
            assert _wrong(inst, redop, inputs, runner.outputs(0), counts) == 0, counts
    finally:
        runner.close()
