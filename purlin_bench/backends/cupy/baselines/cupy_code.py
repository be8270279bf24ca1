"""The plain CuPy code a user would write for a collective on one GPU.

Built from the spec's dataflow like everything else, never from its name: each
flow is reduced once with elementwise CuPy ops (or taken as is for a copy) and
copied into every consumer's output with slice assignment. bfloat16, which
CuPy lacks, goes through float32 with the usual shift-and-round. Every temporary
is allocated up front, so a call can be captured in a CUDA graph.

The baseline writes into its own output arrays: the bench compares the
executor's outputs with them (exact on the bench's integer-valued inputs).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from purlin_bench.spec.instance import Instance

_UFUNCS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


class CupyBaseline:
    def __init__(
        self,
        inst: Instance,
        inputs_of: Callable[[int, int], object],
        storage: np.dtype,
        dtype_name: str,
        redop: str | None,
        device: int = 0,
    ):
        """``inputs_of(slot, rank)`` gives the device input array of a rank in a buffer set."""
        import cupy

        self.inst, self.inputs_of = inst, inputs_of
        self.bf16 = dtype_name == "bfloat16"
        self.ufunc = getattr(cupy, _UFUNCS[redop or "sum"])
        with cupy.cuda.Device(device):
            self.outputs = [cupy.empty(n, dtype=storage) for n in inst.out_counts]
            work = np.float32 if self.bf16 else storage
            biggest = max((f.count for f in inst.flows if len(f.sources) > 1), default=0)
            self.acc = cupy.empty(biggest, dtype=work)
            self.tmp = cupy.empty(biggest, dtype=work) if self.bf16 else None
            self.bits = cupy.empty(biggest, dtype=cupy.uint32) if self.bf16 else None

    def _widen(self, x, out):
        """bfloat16 bits -> float32 (exact): the bits go to the top half."""
        import cupy

        n = x.size
        bits = self.bits[:n]
        bits[...] = x  # widen to 32 bits first: a 16-bit shift by 16 would drop every bit
        cupy.left_shift(bits, 16, out=bits)
        out[...] = bits.view(cupy.float32)
        return out

    def _narrow(self, x, out):
        """float32 -> bfloat16 bits, rounding to nearest even."""
        import cupy

        n = x.size
        bits = self.bits[:n]
        bits[...] = x.view(cupy.uint32)
        lsb = cupy.right_shift(bits, 16) & 1
        bits += 0x7FFF
        bits += lsb
        cupy.right_shift(bits, 16, out=bits)
        out[...] = bits.astype(cupy.uint16)

    def __call__(self, slot: int = 0) -> None:
        """Enqueue one call on the current stream."""
        for flow in self.inst.flows:
            n = flow.count
            src = [self.inputs_of(slot, s.rank)[s.offset : s.offset + n] for s in flow.sources]
            if len(src) == 1:
                value = src[0]
            elif self.bf16:
                acc = self._widen(src[0], self.acc[:n])
                for part in src[1:]:
                    self.ufunc(acc, self._widen(part, self.tmp[:n]), out=acc)
                value = None
            else:
                acc = self.acc[:n]
                self.ufunc(src[0], src[1], out=acc)
                for part in src[2:]:
                    self.ufunc(acc, part, out=acc)
                value = acc
            for place in flow.consumers:
                dst = self.outputs[place.rank][place.offset : place.offset + n]
                if value is None:
                    self._narrow(self.acc[:n], dst)
                else:
                    dst[...] = value
