"""Checking on the GPU without a trip through the host.

Inputs are exact small integers (purlin_bench.inputs); the expected outputs
are computed on the device by the CuPy baseline (exact on such inputs, and
itself tested against the NumPy reference), or uploaded from the NumPy
reference where no baseline runs (one rank per GPU). Outputs are compared
bit for bit on the device, so checking a 1 GiB collective costs
milliseconds, not a host reduction over gigabytes."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from purlin_bench.backends.cupy.baselines import CupyBaseline
from purlin_bench.backends.cupy.timing import Candidate
from purlin_bench.errors import PurlinError
from purlin_bench.spec.instance import Instance


class DeviceReference:
    """Expected outputs in device memory, and the baselines over the same
    inputs: ``cupy`` on virtual ranks (it computed the expected outputs),
    ``nccl`` with one rank per GPU (a communicator, made when first asked)."""

    def __init__(self, runner, inst: Instance, inputs: Sequence[np.ndarray]):
        import cupy

        self.runner, self.inst = runner, inst
        program = runner.program
        device = runner.world.devices[0]
        self._cupy: CupyBaseline | None = None
        self._nccl = None
        with cupy.cuda.Device(device):
            if runner.world.fused:
                self._cupy = CupyBaseline(inst, lambda slot, rank: runner.array(rank, "in", slot), runner.storage, program.dtype, program.redop, device)
                self._cupy(0)
                cupy.cuda.Device(device).synchronize()
                self.expected = self._cupy.outputs
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

    def baseline(self, name: str) -> Candidate:
        runner = self.runner
        sets = runner.sets
        if name == "cupy":
            if self._cupy is None:
                raise PurlinError("the cupy baseline runs on virtual ranks (one GPU); with one rank per GPU use nccl")
            baseline = self._cupy

            def enqueue(target, i: int) -> None:
                with target:
                    baseline(i % sets)

            return Candidate(enqueue, runner.main_stream())
        if name == "nccl":
            from purlin_bench.backends.cupy.nccl import NcclBaseline

            if self._nccl is None:
                self._nccl = NcclBaseline(self.inst, runner, runner.program.dtype, runner.program.redop)
            nccl = self._nccl
            return Candidate(lambda target, i: nccl(target, i % sets), runner.main_stream())
        raise PurlinError(f"unknown baseline '{name}' for the cupy backend (known: cupy, nccl)")
