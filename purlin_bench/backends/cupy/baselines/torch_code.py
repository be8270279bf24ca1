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

from dataclasses import dataclass

import numpy as np

from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.instance import Instance

_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"}


# An index tensor past this many entries (8 bytes each, on the host and
# again on the device: 8 GiB each) is refused: the baseline is then not
# timed, and says why. Only layouts no strided view covers take one
# (ring-shift of 8 ranks up to 128 Mi elements a rank).
MAX_INDEX_ENTRIES = 1 << 30


@dataclass(frozen=True)
class IndexMap:
    """``idx[s, e]``, the flat stacked-input index of output element ``e``'s
    ``s``-th source (outputs stacked rank after rank), held as runs: output
    elements ``[out_start, out_start + length)`` read input elements from
    ``in_start`` on, one run per flow and consumer. A dense map of a 256 MiB
    all-reduce of 8 ranks holds 8 x 8 x 64 Mi entries (32 GiB, 64 GiB in
    bfloat16), which killed a bench on a 128 GiB host; the runs are a few
    dozen, and every question the baseline asks is answered from them."""

    sources: int
    total: int
    runs: tuple[np.ndarray, ...]  # per source: (n, 3) int64 rows (out_start, in_start, length), by out_start

    def __post_init__(self):
        # values() and affine() take each source's runs to tile [0, total)
        # in order, with no empty run to land on.
        for table in self.runs:
            ends = np.concatenate([[0], table[:, 0] + table[:, 2]])
            if (table[:, 2] <= 0).any() or not np.array_equal(table[:, 0], ends[:-1]) or int(ends[-1]) != self.total:
                raise ValueError("an IndexMap's runs must tile [0, total) in order, each at least one element long")

    def values(self, s: int, e: np.ndarray) -> np.ndarray:
        """``idx[s, e]`` for an array of output elements."""
        runs = self.runs[s]
        k = np.searchsorted(runs[:, 0], e, side="right") - 1
        return runs[k, 1] + (e - runs[k, 0])

    def dense(self) -> np.ndarray:
        """The whole map as an (sources, total) array, for an index tensor."""
        if self.sources * self.total > MAX_INDEX_ENTRIES:
            raise PurlinError(
                f"no torch baseline: its index tensor would take {self.sources * self.total * 8 / 2**30:.1f} GiB"
            )
        out = np.empty((self.sources, self.total), dtype=np.int64)
        for s, runs in enumerate(self.runs):
            for o, i, n in runs.tolist():
                out[s, o : o + n] = np.arange(i, i + n, dtype=np.int64)
        return out


def index_map(inst: Instance) -> IndexMap:
    """The spec's dataflow as an IndexMap. PurlinError where outputs reduce
    different numbers of sources, or some output element has none."""
    in_at = np.concatenate([[0], np.cumsum(inst.in_counts)]).astype(np.int64)
    out_at = np.concatenate([[0], np.cumsum(inst.out_counts)]).astype(np.int64)
    counts = {len(f.sources) for f in inst.flows}
    if len(counts) > 1:
        raise PurlinError(f"{inst.spec.name}: outputs reduce different numbers of sources; no torch baseline")
    sources = counts.pop() if counts else 1
    total = int(out_at[-1])
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(sources)]
    for flow in inst.flows:
        ordered = sorted(flow.sources, key=lambda p: (p.rank, p.offset))
        for c in flow.consumers:
            for s, src in enumerate(ordered):
                rows[s].append((int(out_at[c.rank] + c.offset), int(in_at[src.rank] + src.offset), int(flow.count)))
    runs = tuple(np.array(sorted(x for x in r if x[2] > 0), dtype=np.int64).reshape(-1, 3) for r in rows)
    try:
        return IndexMap(sources, total, runs)
    except ValueError:  # the runs leave a gap (or overlap)
        raise PurlinError(f"{inst.spec.name}: some output element has no source; no torch baseline") from None


def affine(imap: IndexMap, shape: tuple[int, ...], over_sources: bool = False) -> tuple[int, tuple[int, ...]] | None:
    """(offset, strides) if the map, as an array of ``shape`` (its first axis
    the sources when ``over_sources``, else source 0 only), is ``offset +
    sum(i_k * stride_k)``, else None. Checked run by run: within a run both
    sides step by one element, so only each run's pieces between the rows of
    the innermost axis need a look, and a piece longer than one element
    needs that axis's stride to be one."""
    nsrc = imap.sources if over_sources else 1
    inner_shape = shape[1:] if over_sources else shape
    if (
        not inner_shape
        or (over_sources and shape[0] != nsrc)
        or int(np.prod(inner_shape)) != imap.total
        or imap.total == 0
    ):
        return None

    def at(flat: int) -> int:
        s, e = divmod(flat, imap.total)
        return int(imap.values(s, np.array([e]))[0])

    base = at(0)
    strides = []
    for axis, n in enumerate(shape):
        strides.append(0 if n == 1 else at(int(np.prod(shape[axis + 1 :]))) - base)
    if any(st < 0 for st in strides):
        return None  # torch.as_strided takes no negative strides: the index tensor does it
    row = inner_shape[-1]
    inner_strides = np.array(strides[1:] if over_sources else strides, dtype=np.int64)
    for s in range(nsrc):
        runs = imap.runs[s]
        for o, i, n in runs.tolist():
            starts = np.concatenate([[o], np.arange((o // row + 1) * row, o + n, row, dtype=np.int64)])
            if len(starts) < n and inner_strides[-1] != 1:
                return None  # some piece spans two elements of a row whose stride is not one
            coords = np.stack(np.unravel_index(starts, inner_shape), axis=0)
            want = base + (strides[0] * s if over_sources else 0) + (inner_strides[:, None] * coords).sum(0)
            if not np.array_equal(i + (starts - o), want):
                return None
    return base, tuple(strides)


def view_shapes(inst: Instance, total: int) -> list[tuple[int, ...]]:
    """Shapes to try an affine view in: flat, per rank, per rank and chunk."""
    R = inst.ranks
    out = [(total,)]
    if total % R == 0:
        out.append((R, total // R))
        if total % (R * R) == 0:
            out.append((R, R, total // (R * R)))
    return out


def plan_for(inst: Instance, imap: IndexMap) -> tuple[int, tuple]:
    """How many torch kernels the baseline takes, and which code: a strided
    view where the index map is affine, else an index tensor."""
    total, sources = imap.total, imap.sources
    if not (inst.op == "reduce" and sources > 1):
        for shape in view_shapes(inst, total):
            found = affine(imap, shape)
            if found:
                return 1, ("view", shape, found[1], found[0])
        return 1, ("index",)
    for shape in view_shapes(inst, total):
        found = affine(imap, (sources, *shape), over_sources=True)
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
        tdtype = {
            "float32": torch.float32,
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "int32": torch.int32,
            "float64": torch.float64,
        }[dtype]
        # The plan (and an index tensor's size bound) before anything is uploaded.
        imap = index_map(inst)
        self.sources = imap.sources
        self.kernels, self.plan = plan_for(inst, imap)
        idx = imap.dense() if self.plan[0] in ("index", "reduce-index") else None
        flat = (
            np.concatenate([np.asarray(x).view(np.uint16) if dtype == "bfloat16" else np.asarray(x) for x in inputs])
            if inputs
            else np.zeros(0)
        )
        host = torch.from_numpy(np.ascontiguousarray(flat))
        host = host.view(torch.bfloat16) if dtype == "bfloat16" else host
        self.x = [host.to(f"cuda:{device}") for _ in range(max(1, sets))]
        self.y = torch.empty(imap.total, dtype=tdtype, device=f"cuda:{device}")
        self.redop = _REDUCE[redop or "sum"]
        where = f"cuda:{device}"
        if idx is not None:
            self.index = torch.from_numpy(idx[0] if self.plan[0] == "index" else idx).to(where)
        if self.plan[0] == "reduce-index":
            self.gathered = torch.empty((imap.sources, imap.total), dtype=tdtype, device=where)
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
        flat = (
            self.y.view(self.torch.int16).cpu().numpy().view(np.uint16)
            if self.y.dtype == self.torch.bfloat16
            else self.y.cpu().numpy()
        )
        at = np.concatenate([[0], np.cumsum(self.inst.out_counts)])
        return [flat[at[r] : at[r + 1]] for r in range(self.inst.ranks)]

    def describe(self) -> str:
        return f"torch, {self.kernels} kernel{'s' if self.kernels > 1 else ''} ({self.plan[0]})"


def checked_candidate(reference):
    """The torch baseline over a device reference's inputs and buffer sets
    (virtual ranks), checked once against its expected outputs before it is
    timed, and kept with the reference (purlin_bench/baselines/torch_code.py)."""
    import cupy
    import torch

    from purlin_bench.backends.cupy.runtime.timing import StreamCandidate

    runner = reference.runner
    if "torch" not in reference.kept:
        device = runner.world.devices[0]
        # A variable program's: the fixed collective of its call's counts (check.VariableReference).
        inst, inputs, expected = (
            reference.call() if reference.inst.variable else (reference.inst, reference.inputs, reference.expected)
        )
        baseline = TorchBaseline(inst, inputs, runner.program.dtype, runner.program.redop, runner.sets, device)
        baseline.run(0)
        torch.cuda.synchronize(device)
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[runner.itemsize]
        wrong = sum(
            # Expected outputs on the device (a device reference) or the host (a variable one).
            int(np.count_nonzero(np.asarray(got).view(width) != cupy.asnumpy(want).view(width)))
            for got, want in zip(baseline.outputs(), expected)
        )
        if wrong:
            raise PurlinError(f"the torch baseline got {wrong} elements wrong ({baseline.describe()}): not timed")
        reference.kept["torch"] = baseline
    baseline, streams = reference.kept["torch"], {}

    def enqueue(target, i: int) -> None:
        if target.ptr not in streams:
            streams[target.ptr] = torch.cuda.ExternalStream(
                target.ptr, device=torch.device("cuda", runner.world.devices[0])
            )
        with torch.cuda.stream(streams[target.ptr]):
            baseline.run(i % runner.sets)

    return StreamCandidate(enqueue, runner.main_stream())
