"""The CPU reference runs variable-size programs with per-call counts
(issue 31): every variable built-in, 1-9 ranks, every strategy, every dtype
(fp8 included), counts with zeros, all zero, one rank taking everything and
every distribution, several calls of different counts on one runner; on
exact inputs through the measurement service (bit for bit, as purlin check)
and on random floats through check_program (each dtype's rounding allowed);
also with each list split over thread blocks, and with a rank per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from purlin_bench.backends.numpy import NumpyBackend
from purlin_bench.backends.numpy.blocks import BlockSplitRunner
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.measure.compare import check_program, compare
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import DTYPES, REDOPS, random_inputs
from purlin_bench.measure.service import MeasurementService
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts
from purlin_bench.strategies import STRATEGIES

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("ranks", range(1, 10))
@pytest.mark.parametrize("name", VARIABLE)
def test_every_strategy_and_dtype_is_exact_on_every_distribution(name, ranks):
    spec = load_builtin(name)
    service = MeasurementService(NumpyBackend(ranks, seed=ranks))
    failures = []
    for dtype in DTYPES:
        inst = service.instance(spec, 19, dtype)
        for strategy in STRATEGIES:
            for redop in REDOPS if spec.op == "reduce" else (None,):
                result = service.check(inst, RunConfig.make(strategy, {}, {}), dtype, redop, seed=ranks, counts="all")
                if not result.ok:
                    failures.append(f"{dtype} {strategy} {redop}: {result.wrong} wrong")
    assert not failures, failures


@pytest.mark.parametrize("name", VARIABLE)
def test_zeros_one_hot_and_full_counts_on_one_runner(name):
    rng = np.random.default_rng(5)
    for ranks in (1, 2, 5, 8):
        inst = instantiate(load_builtin(name), ranks, 33, 4)
        k = len(inst.count_keys)
        hot = [draw_counts(inst, "hot", rng) for _ in range(2)]
        one = tuple(33 if i == k // 2 else 0 for i in range(k))  # a single pair carries everything
        for strategy in STRATEGIES:
            for params in ({}, {"slice_bytes": 16, "channels": 3}):
                program = derive_program(inst, strategy, "float32", params=params)
                runner = NumpyRunner(program, seed=ranks)
                for call, counts in enumerate([(0,) * k, (33,) * k, one, *hot, (0,) * k], start=1):
                    x = random_inputs(rng, program.in_counts, np.dtype(np.float32), program.redop)
                    runner.load(x, 0, counts=counts)
                    runner.run(0)
                    assert compare(inst, program, x, runner.outputs(0), counts).ok, (strategy, params, counts)
                    assert runner.epoch == call  # the same flags, epoch after epoch, whatever the sizes


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "int32"])  # int32: wraps
@pytest.mark.parametrize("name", VARIABLE)
def test_random_inputs_within_each_dtypes_rounding(name, dtype):
    for ranks in (3, 7):
        inst = instantiate(load_builtin(name), ranks, 45, DTYPES[dtype].itemsize)
        for strategy in STRATEGIES:
            program = derive_program(inst, strategy, dtype)
            for dist in DISTRIBUTIONS:
                result = check_program(inst, program, NumpyRunner(program, seed=1), seed=ranks, calls=2, counts=dist)
                assert result.ok, (ranks, strategy, dist, result)


def test_the_thread_block_split_runs_variable_sizes():
    rng = np.random.default_rng(2)
    for name in VARIABLE:
        inst = instantiate(load_builtin(name), 4, 29, 4)
        for strategy in STRATEGIES:
            program = derive_program(inst, strategy, "float32")
            runner = BlockSplitRunner(program, seed=3, blocks=3, threads=2)
            for dist in DISTRIBUTIONS:
                counts = draw_counts(inst, dist, rng)
                x = random_inputs(rng, program.in_counts, np.dtype(np.float32), program.redop)
                runner.load(x, 0, counts=counts)
                runner.run(0)
                assert compare(inst, program, x, runner.outputs(0), counts).ok, (name, strategy, dist)


@pytest.mark.timeout(240)
def test_check_with_a_rank_per_process():
    # Every process draws the same counts (one seed) and loads them with the inputs.
    args = [
        "check",
        "all-to-all-v,reduce-scatter-v",
        "--procs",
        "3",
        "--backend",
        "numpy",
        "--strategy",
        "push,ring",
        "--count",
        "0,9",
        "--no-inplace",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "purlin_bench", *args],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "all passed: 8 passed, 0 wrong, 0 errors" in done.stdout, done.stdout


def test_a_variable_rows_floor_is_the_bytes_its_call_moves_not_its_capacity():
    """Capacity buffers put all-to-all-v's floor past the time measured (139-149%)."""
    from purlin_bench.backends.port import TimingPolicy
    from purlin_bench.spec.roofline import Bandwidth, min_bytes
    from purlin_bench.spec.variable import at_counts
    from purlin_bench.tools.bench.measure import BenchOptions, Measurer

    inst = instantiate(load_builtin("all-to-all-v"), 4, 64, 4)
    counts = tuple([64] + [3] * (len(inst.count_keys) - 1))  # the capacity set by one large count
    bench = Measurer(MeasurementService(NumpyBackend(4)), BenchOptions(TimingPolicy(1, 0, 1), inplace=False),
                     Bandwidth(1e9, "local"))
    row = bench.measure(inst, RunConfig.make("push"), "float32", None, counts=counts)
    assert row.floor_us == pytest.approx(min_bytes(at_counts(inst, counts)) / 1e9 * 1e6)
    assert row.floor_us < min_bytes(inst) / 1e9 * 1e6 / 4
