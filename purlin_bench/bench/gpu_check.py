"""Checking on the GPU without a trip through the host.

Inputs are the bench's exact small integers; the expected outputs are computed
on the device by the CuPy baseline (exact on such inputs, and itself tested
against the NumPy reference), or uploaded from the NumPy reference where no
baseline runs (one rank per GPU). Outputs are compared bit for bit on the
device, so checking a 1 GiB collective costs milliseconds, not a host
reduction over gigabytes."""

from __future__ import annotations

import numpy as np

from purlin_bench.bench.baseline import CupyBaseline
from purlin_bench.bench.inputs import exact_inputs
from purlin_bench.check import CheckResult
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance


def expected_outputs(runner, inst: Instance, program: Program, inputs: list[np.ndarray]):
    """Write ``inputs`` into the runner's buffer set 0 and return (baseline or
    None, expected device outputs). Call before running an in-place program:
    it overwrites its inputs."""
    import cupy

    device = runner.world.devices[0]
    runner.write_inputs(inputs, 0)
    with cupy.cuda.Device(device):
        if runner.world.fused:
            baseline = CupyBaseline(inst, lambda slot, rank: runner.array(rank, "in", slot), runner.storage, program.dtype, program.redop, device)
            baseline(0)
            cupy.cuda.Device(device).synchronize()
            return baseline, baseline.outputs
        expected = []
        for rank, x in enumerate(inst.reference(inputs, program.redop)):
            with cupy.cuda.Device(runner.world.devices[rank]):
                expected.append(cupy.asarray(x.view(runner.storage)))
        return None, expected


def run_and_count_wrong(runner, expected) -> int:
    """One call on poisoned outputs, then the elements that differ in any bit."""
    import cupy

    stream = runner.main_stream()
    with stream:
        runner.poison()
    runner.launch(stream)
    runner.synchronize(stream)
    runner.check_status()
    width = {1: cupy.uint8, 2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}[runner.itemsize]
    wrong = 0
    for rank, want in enumerate(expected):
        with cupy.cuda.Device(runner.world.devices[rank]):
            got = runner.array(rank, "out").view(width)
            wrong += int(cupy.count_nonzero(got != cupy.asarray(want).view(width)))
    return wrong


def exact_check(runner, inst: Instance, program: Program, seed: int = 0) -> CheckResult:
    _, dtype = resolve_dtype(program.dtype)
    inputs = exact_inputs(program.in_counts, dtype, program.redop, seed)
    _, expected = expected_outputs(runner, inst, program, inputs)
    return CheckResult(run_and_count_wrong(runner, expected), sum(program.out_counts))
