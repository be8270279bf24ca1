"""The shortest torch code a user would write for a collective on one GPU.

Virtual ranks' inputs stacked in one tensor, outputs in another, and the
collective as one or two torch kernels between them, derived from the
spec's dataflow (never its name):

* every output element is some input element (a copy) or the reduction of
  S input elements (a reduce); that gives an index map ``idx[s, e]`` from
  output element ``e`` to its ``s``-th source in the stacked input;
* where that map is affine over a few dimensions (a strided view of the
  input, zero strides allowed), the copy is one ``copy_`` from that view and
  the reduction one ``sum``/``prod``/``amax``/``amin`` over its first axis;
  a reduction whose value goes to several outputs (all-reduce) is reduced
  once and then copied out (two kernels, as a user writes ``x.sum(0)`` then
  ``out.copy_(s.expand(...))``);
* anything else goes through an index tensor: one ``index_select`` for a
  copy, a gather and a reduction for a reduce.

Checked like any candidate: its outputs after one call are compared with the
expected outputs before it is timed.
"""

from __future__ import annotations

import numpy as np

from purlin_bench.errors import PurlinError
from purlin_bench.spec.instance import Instance

_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"}


def index_map(inst: Instance) -> tuple[np.ndarray, int]:
    """``idx[s, e]``: the flat stacked-input index of output element ``e``'s
    ``s``-th source (outputs stacked rank after rank); and how many sources
    every element has. PurlinError where the count differs between elements."""
    in_at = np.concatenate([[0], np.cumsum(inst.in_counts)])
    out_at = np.concatenate([[0], np.cumsum(inst.out_counts)])
    counts = {len(f.sources) for f in inst.flows}
    if len(counts) > 1:
        raise PurlinError(f"{inst.spec.name}: outputs reduce different numbers of sources; no torch baseline")
    sources = counts.pop() if counts else 1
    idx = np.full((sources, int(out_at[-1])), -1, dtype=np.int64)
    for flow in inst.flows:
        ramp = np.arange(flow.count, dtype=np.int64)
        for c in flow.consumers:
            at = out_at[c.rank] + c.offset
            for s, src in enumerate(sorted(flow.sources, key=lambda p: (p.rank, p.offset))):
                idx[s, at : at + flow.count] = in_at[src.rank] + src.offset + ramp
    if (idx < 0).any():
        raise PurlinError(f"{inst.spec.name}: some output element has no source; no torch baseline")
    return idx, sources


def affine(idx: np.ndarray, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """(offset, strides) if ``idx`` reshaped to ``shape`` is ``offset + sum(i_k
    * stride_k)``, else None."""
    if int(np.prod(shape)) != idx.size or idx.size == 0:
        return None
    grid = idx.reshape(shape)
    base = int(grid.flat[0])
    strides = []
    for axis, n in enumerate(shape):
        if n == 1:
            strides.append(0)
            continue
        step = [0] * len(shape)
        step[axis] = 1
        strides.append(int(grid[tuple(step)]) - base)
    if any(st < 0 for st in strides):
        return None  # torch.as_strided takes no negative strides: the index tensor does it
    expect = base + sum(np.arange(n).reshape([-1 if k == a else 1 for k in range(len(shape))]) * s for a, (n, s) in enumerate(zip(shape, strides)))
    return (base, tuple(strides)) if np.array_equal(grid, expect) else None


def view_shapes(inst: Instance, total: int) -> list[tuple[int, ...]]:
    """Shapes to try an affine view in: flat, per rank, per rank and chunk."""
    R = inst.ranks
    out = [(total,)]
    if total % R == 0:
        out.append((R, total // R))
        if total % (R * R) == 0:
            out.append((R, R, total // (R * R)))
    return out


def plan_for(inst: Instance, idx: np.ndarray, sources: int) -> tuple[int, tuple]:
    """How many torch kernels the baseline takes, and which code: a strided
    view where the index map is affine, else an index tensor."""
    total = idx.shape[1]
    if not (inst.op == "reduce" and sources > 1):
        for shape in view_shapes(inst, total):
            found = affine(idx[0], shape)
            if found:
                return 1, ("view", shape, found[1], found[0])
        return 1, ("index",)
    for shape in view_shapes(inst, total):
        found = affine(idx, (sources, *shape))
        if not found:
            continue
        base, strides = found
        # A zero stride in an output axis: one value goes to many outputs.
        # Reduce without that axis once, then copy it out.
        zero = [k for k, st in enumerate(strides[1:]) if st == 0 and shape[k] > 1]
        if zero:
            axis = zero[0]
            small = tuple(n for k, n in enumerate(shape) if k != axis)
            small_strides = tuple(st for k, st in enumerate(strides[1:]) if k != axis)
            return 2, ("reduce-expand", (sources, *small), (strides[0], *small_strides), base, shape, axis)
        return 1, ("reduce-view", (sources, *shape), strides, base)
    return 2, ("reduce-index",)


class TorchBaseline:
    """One call: ``run(slot)`` from stacked inputs ``x[slot]`` into stacked
    outputs ``y``, on torch's current stream (the caller sets it)."""

    def __init__(self, inst: Instance, inputs: list[np.ndarray], dtype: str, redop: str | None, sets: int, device: int):
        import torch

        self.torch = torch
        self.inst = inst
        tdtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32, "float64": torch.float64}[dtype]
        flat = np.concatenate([np.asarray(x).view(np.uint16) if dtype == "bfloat16" else np.asarray(x) for x in inputs]) if inputs else np.zeros(0)
        host = torch.from_numpy(np.ascontiguousarray(flat))
        host = host.view(torch.bfloat16) if dtype == "bfloat16" else host
        self.x = [host.to(f"cuda:{device}") for _ in range(max(1, sets))]
        idx, self.sources = index_map(inst)
        total = idx.shape[1]
        self.y = torch.empty(total, dtype=tdtype, device=f"cuda:{device}")
        self.redop = _REDUCE[redop or "sum"]
        self.kernels, self.plan = plan_for(inst, idx, self.sources)
        where = f"cuda:{device}"
        if self.plan[0] in ("index", "reduce-index"):
            self.index = torch.from_numpy(idx[0] if self.plan[0] == "index" else idx).to(where)
        if self.plan[0] == "reduce-index":
            self.gathered = torch.empty(idx.shape, dtype=tdtype, device=where)
        if self.plan[0] == "reduce-expand":
            self.partial = torch.empty(self.plan[1][1:], dtype=tdtype, device=where)

    def _reduce(self, src, out):
        torch = self.torch
        if self.redop == "sum":
            return torch.sum(src, 0, dtype=out.dtype, out=out)
        if self.redop == "prod":
            return torch.prod(src, 0, dtype=out.dtype, out=out)
        return getattr(torch, self.redop)(src, 0, out=out)

    def run(self, slot: int = 0) -> None:
        torch, x, kind = self.torch, self.x[slot % len(self.x)], self.plan[0]
        if kind == "view":
            _, shape, strides, base = self.plan
            self.y.view(shape).copy_(torch.as_strided(x, shape, strides, base))
        elif kind == "index":
            torch.index_select(x, 0, self.index, out=self.y)
        elif kind == "reduce-view":
            _, shape, strides, base = self.plan
            self._reduce(torch.as_strided(x, shape, strides, base), self.y.view(shape[1:]))
        elif kind == "reduce-expand":
            _, shape, strides, base, full, axis = self.plan
            self._reduce(torch.as_strided(x, shape, strides, base), self.partial)
            self.y.view(full).copy_(self.partial.unsqueeze(axis).expand(full))
        else:
            torch.index_select(x, 0, self.index.reshape(-1), out=self.gathered.view(-1))
            self._reduce(self.gathered, self.y)

    def outputs(self) -> list[np.ndarray]:
        """Per-rank host copies of the outputs, as the reference's."""
        flat = self.y.view(self.torch.int16).cpu().numpy().view(np.uint16) if self.y.dtype == self.torch.bfloat16 else self.y.cpu().numpy()
        at = np.concatenate([[0], np.cumsum(self.inst.out_counts)])
        return [flat[at[r] : at[r + 1]] for r in range(self.inst.ranks)]

    def describe(self) -> str:
        return f"torch, {self.kernels} kernel{'s' if self.kernels > 1 else ''} ({self.plan[0]})"
