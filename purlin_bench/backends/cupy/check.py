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

        self.runner, self.inst, self.inputs = runner, inst, list(inputs)
        self._torch = None
        program = runner.program
        device = runner.world.devices[0]
        self._cupy: CupyBaseline | None = None
        self._nccl = None
        with cupy.cuda.Device(device):
            if runner.world.fused:
                self._cupy = CupyBaseline(
                    inst,
                    lambda slot, rank: runner.array(rank, "in", slot),
                    runner.storage,
                    program.dtype,
                    program.redop,
                    device,
                )
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
        if name == "torch":
            return self._torch_candidate()
        raise PurlinError(f"unknown baseline '{name}' for the cupy backend (known: torch, cupy, nccl)")

    def _torch_candidate(self) -> Candidate:
        """The shortest torch code for the collective (torch_baseline.py),
        checked once against the expected outputs before it is timed."""
        import cupy

        from purlin_bench.backends.cupy.torch_baseline import TorchBaseline

        runner = self.runner
        if not runner.world.fused:
            raise PurlinError("the torch baseline runs on virtual ranks (one GPU); with one rank per GPU use nccl")
        try:
            import torch
        except ImportError:
            raise PurlinError("the torch baseline needs torch (pip install torch)") from None
        if self._torch is None:
            device = runner.world.devices[0]
            baseline = TorchBaseline(
                self.inst, self.inputs, runner.program.dtype, runner.program.redop, runner.sets, device
            )
            baseline.run(0)
            torch.cuda.synchronize(device)
            width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[runner.itemsize]
            wrong = sum(
                int(np.count_nonzero(np.asarray(got).view(width) != cupy.asnumpy(want).view(width)))
                for got, want in zip(baseline.outputs(), self.expected)
            )
            if wrong:
                raise PurlinError(f"the torch baseline got {wrong} elements wrong ({baseline.describe()}): not timed")
            self._torch = baseline
        baseline, streams = self._torch, {}

        def enqueue(target, i: int) -> None:
            if target.ptr not in streams:
                streams[target.ptr] = torch.cuda.ExternalStream(
                    target.ptr, device=torch.device("cuda", runner.world.devices[0])
                )
            with torch.cuda.stream(streams[target.ptr]):
                baseline.run(i % runner.sets)

        return Candidate(enqueue, runner.main_stream())
