"""Checking on the GPU without a trip through the host.

Inputs are exact small integers (purlin_bench.base.inputs); the expected outputs
are computed on the device by the CuPy baseline (exact on such inputs, and
itself tested against the NumPy reference), or uploaded from the NumPy
reference where no baseline runs (one rank per GPU). Outputs are compared
bit for bit on the device, so checking a 1 GiB collective costs
milliseconds, not a host reduction over gigabytes."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from purlin_bench.backends.cupy.baselines.cupy_code import CupyBaseline
from purlin_bench.backends.cupy.runtime.timing import StreamCandidate
from purlin_bench.backends.port import GPUS, VIRTUAL
from purlin_bench.spec.instance import Instance


class DeviceReference:
    """Expected outputs in device memory, and the baselines over the same
    inputs (the registry's, purlin_bench/baselines/): ``cupy`` on virtual
    ranks (``direct``: it computed the expected outputs), ``nccl`` with one
    rank per GPU (a communicator, made when first asked and ``kept``)."""

    def __init__(self, runner, inst: Instance, inputs: Sequence[np.ndarray]):
        import cupy

        self.runner, self.inst, self.inputs = runner, inst, list(inputs)
        # What a baseline builds once over these buffers (a communicator, a
        # checked torch baseline), by its name: every comparison reuses it.
        self.kept: dict[str, Any] = {}
        program = runner.program
        device = runner.world.devices[0]
        self.direct: CupyBaseline | None = None
        with cupy.cuda.Device(device):
            if runner.world.fused:
                self.direct = CupyBaseline(
                    inst,
                    lambda slot, rank: runner.array(rank, "in", slot),
                    runner.storage,
                    program.dtype,
                    program.redop,
                    device,
                )
                self.direct(0)
                cupy.cuda.Device(device).synchronize()
                self.expected = self.direct.outputs
                return
        self.expected = []
        for rank, x in enumerate(inst.reference(list(inputs), program.redop)):
            with cupy.cuda.Device(runner.world.devices[rank]):
                self.expected.append(cupy.asarray(x.view(runner.storage)))

    def count_wrong(self, runner, slot: int = 0) -> int:
        """Elements of ``runner``'s outputs in ``slot`` that differ in any bit."""
        import cupy

        width = {1: cupy.uint8, 2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}[runner.itemsize]
        wrong = 0
        for rank, want in enumerate(self.expected):
            with cupy.cuda.Device(runner.world.devices[rank]):
                got = runner.array(rank, "out", slot).view(width)
                wrong += int(cupy.count_nonzero(got != cupy.asarray(want).view(width)))
        return wrong

    def baseline(self, name: str) -> StreamCandidate:
        return _baseline(self, name)


class VariableReference:
    """A variable program's reference on the GPU: each buffer set's expected
    outputs follow the counts the runner holds (the host reference computes
    them, spec/variable.py), and the baselines are built for the call those
    counts make (a bench row runs one counts vector in every set): torch's
    shortest code for it is the fixed-size collective of those sizes over
    the inputs' prefixes, index copies derived from the counts on the host,
    as torch's own ``*_v`` calls take their splits."""

    def __init__(self, runner, inst: Instance, inputs: Sequence[np.ndarray]):
        from purlin_bench.backends.numpy import HostReference

        self.runner, self.inst, self.inputs = runner, inst, list(inputs)
        self.host = HostReference(inst, runner.program.redop, inputs)
        self.kept: dict[str, Any] = {}

    def count_wrong(self, runner, slot: int = 0) -> int:
        return self.host.count_wrong(runner, slot)

    def call(self) -> tuple[Instance, list[np.ndarray], list[np.ndarray]]:
        """The fixed instance of the runner's counts (buffer set 0), its inputs and expected outputs."""
        from purlin_bench.spec.variable import at_counts, expected_outputs

        counts = self.runner.loaded_counts(0)
        fixed = at_counts(self.inst, counts)
        inputs = [x[:n] for x, n in zip(self.inputs, fixed.in_counts)]
        return fixed, inputs, expected_outputs(self.inst, self.inputs, self.runner.program.redop, counts)

    def baseline(self, name: str) -> StreamCandidate:
        return _baseline(self, name)


def _baseline(reference, name: str) -> StreamCandidate:
    """Baseline ``name`` over a reference's inputs and its runner's buffer sets (purlin_bench/baselines/)."""
    from purlin_bench import baselines

    layout = VIRTUAL if reference.runner.world.fused else GPUS
    return baselines.make(name, baselines.Site("cupy", layout, reference.runner, reference.inst, reference=reference))
