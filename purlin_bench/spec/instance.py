"""A spec instantiated for R ranks, a root, a count and an element size.

This is the semantics layer's output: buffer sizes, where every chunk sits,
the *dataflow* (which input places feed which output places) and the NumPy
reference. Strategies read only the dataflow (:attr:`Instance.flows`), never the
collective's name.

How ``count`` maps to chunks (as in NCCL, any positive count works):

* ``count: chunk`` (all-gather, all-to-all, gather, scatter, reduce-scatter):
  every chunk holds ``count`` elements.
* ``count: buffer`` (all-reduce, broadcast, reduce): ``count`` is the size of a
  buffer that lists every chunk name once (all-reduce's input); the chunks split
  it in their order there, each a whole number of 16-byte units where the count
  allows, the first ones full and the last taking the rest (some may be empty).
* ``count: variable`` (all-gather-v, reduce-scatter-v, all-to-all-v): every
  chunk's size comes with each call, one count per chunk name
  (:attr:`Instance.count_keys`, in the order of the names' indices); ``count``
  is the capacity, the most any one chunk may hold. The instance is laid out
  at capacity, and each place says which counts size and precede it, so a
  program built from it serves every call (spec/variable.py gives the layout
  and reference of one call's counts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from typing import Sequence

import numpy as np

from purlin_bench.base.dtypes import accumulate
from purlin_bench.base.errors import SpecError
from purlin_bench.spec.expr import ExprError
from purlin_bench.spec.loader import MAX_CHUNKS, CollectiveSpec
from purlin_bench.base.sizes import MAX_BYTES, counted, format_bytes

ChunkKey = tuple  # ("c", 3) or ("c",)


def key_text(key: ChunkKey) -> str:
    return key[0] if len(key) == 1 else f"{key[0]}({', '.join(map(str, key[1:]))})"


class Prefix(SequenceABC):
    """The first ``n`` of one buffer's count ids, read-only, standing for the
    tuple ``ids[:n]``: a variable-size place's ``base``.

    As a tuple per place the bases of a buffer of n chunks hold n²/2 entries
    (a 10-line spec of 4000 chunks took 38 s and 1.15 GB to load); every place
    of a buffer shares one ``ids`` instead, so they hold n. It compares and
    hashes as the tuple it stands for, so a Place or Ref built from it equals
    one read back from JSON, and it iterates without copying."""

    __slots__ = ("ids", "n", "_hash")

    def __init__(self, ids: tuple[int, ...], n: int):
        self.ids, self.n, self._hash = ids, n, None

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return islice(self.ids, self.n)

    def __getitem__(self, i):
        return self.ids[: self.n][i]  # a copy: rare (consumers iterate)

    def __contains__(self, x) -> bool:
        return x in islice(self.ids, self.n)

    def __eq__(self, other) -> bool:
        if isinstance(other, Prefix):
            return self.n == other.n and (self.ids is other.ids or self.ids[: self.n] == other.ids[: other.n])
        if isinstance(other, tuple):
            return self.ids[: self.n] == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:  # places are hashed again and again (flows group by them)
            self._hash = hash(self.ids[: self.n])
        return self._hash

    def __repr__(self) -> str:
        return repr(self.ids[: self.n])

    def __reduce__(self):
        return (Prefix, (self.ids, self.n))  # pickled once per shared ids (pickle memoizes it)


@dataclass(frozen=True)
class Place:
    """``count`` elements at ``offset`` of one rank's input or output buffer.

    With variable sizes, offset and count are at capacity; ``var`` is the
    index of the per-call count that sizes this chunk and ``base`` those of
    the chunks before it in its buffer (its offset moves with them)."""

    rank: int
    offset: int
    count: int
    base: tuple[int, ...] | Prefix = ()
    var: int | None = None


@dataclass(frozen=True)
class Flow:
    """One unit of dataflow: the same ``count`` elements read at every source
    place are copied (one source) or reduced (any number) into every consumer place."""

    sources: tuple[Place, ...]
    consumers: tuple[Place, ...]
    count: int

    def source_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({p.rank for p in self.sources}))

    def consumer_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({p.rank for p in self.consumers}))


@dataclass(frozen=True, eq=False)
class Instance:
    spec: CollectiveSpec
    ranks: int
    root: int
    count: int
    itemsize: int
    chunk_counts: dict[ChunkKey, int]
    inputs: tuple[tuple[tuple[ChunkKey, Place], ...], ...]  # per rank, in layout order
    outputs: tuple[tuple[tuple[ChunkKey, Place], ...], ...]
    flows: tuple[Flow, ...]
    # count: variable: the chunk names in the order of the per-call counts
    # vector (sorted: c(0), c(1), ... or c(0, 0), c(0, 1), ...); () otherwise.
    count_keys: tuple[ChunkKey, ...] = ()

    @property
    def variable(self) -> bool:
        return bool(self.count_keys)

    @property
    def op(self) -> str:
        return self.spec.op

    @property
    def in_counts(self) -> tuple[int, ...]:
        return tuple(sum(p.count for _, p in layout) for layout in self.inputs)

    @property
    def out_counts(self) -> tuple[int, ...]:
        return tuple(sum(p.count for _, p in layout) for layout in self.outputs)

    def flows_sent(self) -> Counter[int]:
        """How many flows each rank sends (a flow is sent by its first
        source's rank): what push slices by and the default sizes channels by."""
        return Counter(flow.sources[0].rank for flow in self.flows)

    def sources_of(self, key: ChunkKey) -> list[Place]:
        return list(self._sources.get(key, ()))

    @cached_property
    def _sources(self) -> dict[ChunkKey, list[Place]]:
        """Every chunk's input places, gathered once: a reference looks them
        up per output chunk, and a scan of every input per lookup made it
        quadratic in chunks (12 s for 1000 chunks a buffer at 2 ranks)."""
        found: dict[ChunkKey, list[Place]] = {}
        for layout in self.inputs:
            for key, place in layout:
                found.setdefault(key, []).append(place)
        return found

    def reference(self, inputs: Sequence[np.ndarray], redop: str | None = None) -> list[np.ndarray]:
        """Expected outputs for ``inputs`` (one array per rank), accumulated in
        float64 (int64 for integers) and cast once to the buffers' dtype."""
        if len(inputs) != self.ranks:
            raise ValueError(f"expected {self.ranks} input arrays, got {len(inputs)}")
        dtype = inputs[0].dtype
        outs = [np.zeros(n, dtype=dtype) for n in self.out_counts]
        for rank, layout in enumerate(self.outputs):
            for key, place in layout:
                parts = [inputs[s.rank][s.offset : s.offset + s.count] for s in self.sources_of(key)]
                if self.op == "copy":
                    value = parts[0]
                else:
                    value = accumulate(parts, redop or self.spec.redop or "sum").astype(dtype)
                outs[rank][place.offset : place.offset + place.count] = value
        return outs

    def inplace_offsets(self) -> tuple[int, ...]:
        """Per rank, the offset of its smaller buffer inside its larger one when
        the collective runs in place (nccl-tests' convention: all-gather's input is
        chunk r of the output, reduce-scatter's output is chunk r of the input).

        Nesting is decided by the layout (chunk names in buffer order), not by
        element counts: at small counts both buffers can hold the same number
        of elements (reduce-scatter of count 0, or a buffer-mode chunk split
        that leaves trailing chunks empty), and the side that is larger by
        count no longer says which chunk list holds the other."""
        if self.variable:
            # Where the input would sit in the output moves with the counts;
            # the model has one offset per rank (a later phase may add it).
            raise SpecError(f"{self.spec.name} has no in-place form: its sizes come with each call, so its input "
                            "would sit at a per-call offset of its output")
        offsets = []
        for rank in range(self.ranks):
            ins, outs = self.inputs[rank], self.outputs[rank]
            at = _run_position(outs, ins)  # the output a run of the input's chunks
            if at is not None:
                offsets.append(ins[at][1].offset if at < len(ins) else 0)
                continue
            at = _run_position(ins, outs)
            if at is None:
                raise SpecError(f"{self.spec.name} cannot run in place: rank {rank}'s input and output do not nest (no "
                                f"common run of chunks)")
            # When the counts tie, every chunk outside the run is empty, so the
            # run starts at offset 0 and the model's tie rule (the input is the
            # view) agrees with either reading.
            offsets.append(outs[at][1].offset if at < len(outs) else 0)
        return tuple(offsets)

    def inplace_refusal(self) -> str | None:
        """Why this collective cannot run in place, or None if it can."""
        try:
            self.inplace_offsets()
        except SpecError as exc:
            return str(exc)
        return None

    def busbw_factor(self) -> float:
        return self.spec.busbw_at(self.ranks)  # a SpecError, not a NaN row, where it is not a number


def _run_position(inner, outer) -> int | None:
    """Where ``inner``'s chunk names appear as one contiguous run of
    ``outer``'s (the first such position; 0 for an empty ``inner``), or None."""
    small, large = [k for k, _ in inner], [k for k, _ in outer]
    return next((p for p in range(len(large) - len(small) + 1) if large[p : p + len(small)] == small), None)


# The most ranks anything is built for. Two things hold only up to 64: the
# exact inputs (sums of values in [-4, 4] over 64 ranks stay below 256, which
# bfloat16 still holds: purlin_bench/base/inputs.py) and the GPU kernel's slice
# bases, kept in shared memory for 64 ranks (MAX_SHARED_BASES in atoms/snac.cu).
MAX_RANKS = 64
MAX_RANKS_WHY = "exact checked inputs and the GPU kernel's shared-memory slice bases hold for at most 64"


# Most chunks one rank's buffer lists in a variable-size spec: a slice's offset there is
# the sum of the counts of the chunks before it, and the program, its validation and the
# compiled kernel's addresses each carry those sums, so their size grows as the square of
# this (audit 26: check of 1000 chunks 5.6 s at 2 ranks, 2000 about 20 s, 4000 past a
# minute). All-to-all-v at 64 ranks lists 64; an MoE layer's per-expert chunks, hundreds.
MAX_VARIABLE_CHUNKS = 1024


def _layouts(spec: CollectiveSpec, side: str, ranks: int, root: int) -> list[list[ChunkKey]]:
    entries = spec.input if side == "input" else spec.output
    result = []
    for r in range(ranks):
        env = {"r": r, "R": ranks, "root": root}
        budget = [MAX_CHUNKS]  # loop iterations left, shared by this rank's entries
        keys: list[ChunkKey] = []
        for entry in entries:
            try:
                keys.extend(entry.expand(env, budget))
            except ExprError as exc:
                raise SpecError(f"{spec.source}: {entry.where}: {exc} (rank {r} of {ranks})") from None
            if spec.variable and len(keys) > MAX_VARIABLE_CHUNKS:
                raise SpecError(f"{spec.source}: {entry.where}: rank {r}'s {side} (R={ranks}) lists more than "
                                f"{MAX_VARIABLE_CHUNKS} chunks, at most {MAX_VARIABLE_CHUNKS} in a variable-size "
                                "buffer: each slice's offset sums the counts of the chunks before it")
        result.append(keys)
    return result


def _chunk_counts(spec: CollectiveSpec, ins: list[list[ChunkKey]], outs: list[list[ChunkKey]], count: int,
                  itemsize: int, ranks: int) -> dict[ChunkKey, int]:
    names = {k for layout in ins + outs for k in layout}
    if spec.count_mode in ("chunk", "variable"):  # variable: every chunk at capacity
        return {k: count for k in names}
    # count: buffer. Find a buffer listing every chunk name exactly once.
    for layout in ins + outs:
        if set(layout) == names and len(layout) == len(names):
            unit = max(1, 16 // itemsize)
            per = -(-count // max(1, len(layout)))
            per = -(-per // unit) * unit
            return {k: max(0, min(per, count - i * per)) for i, k in enumerate(layout)}
    raise SpecError(
        f"{spec.source}: count: 'buffer' needs one buffer that lists every chunk name once "
        f"(with {ranks} ranks none does); use 'count: chunk'"
    )


def _place(layout: list[ChunkKey], counts: dict[ChunkKey, int], rank: int,
           index: dict[ChunkKey, int] | None = None) -> tuple[tuple[ChunkKey, Place], ...]:
    """Chunks placed one after another; with ``index`` (variable sizes) each
    place also names its count and those of the chunks before it (a Prefix
    of the buffer's ids, shared by its places: linear, not quadratic)."""
    ids = tuple(index[key] for key in layout) if index is not None else ()
    offset, placed = 0, []
    for k, key in enumerate(layout):
        if index is None:
            placed.append((key, Place(rank, offset, counts[key])))
        else:
            placed.append((key, Place(rank, offset, counts[key], Prefix(ids, k), ids[k])))
        offset += counts[key]
    return tuple(placed)


def instantiate(spec: CollectiveSpec, ranks: int, count: int, itemsize: int, root: int = 0) -> Instance:
    """Instantiate ``spec`` and validate its semantics for this rank count."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise SpecError(f"ranks must be a positive whole number, got {ranks!r}")
    if ranks > MAX_RANKS:
        raise SpecError(f"{ranks} ranks is more than the {MAX_RANKS} supported: {MAX_RANKS_WHY}")
    if not spec.supports_ranks(ranks):
        raise SpecError(f"{spec.name} does not support {counted(ranks, 'rank')} (requires {spec.requires.text})")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise SpecError(f"count must be a whole number >= 0, got {count!r}")
    if spec.rooted and not 0 <= root < ranks:
        raise SpecError(f"root {root} is out of range for {counted(ranks, 'rank')} (0..{ranks - 1})")
    ins = _layouts(spec, "input", ranks, root)
    outs = _layouts(spec, "output", ranks, root)
    counts = _chunk_counts(spec, ins, outs, count, itemsize, ranks)
    _bounded(spec, ins + outs, counts, itemsize, ranks)
    keys = tuple(sorted(counts, key=_key_order)) if spec.count_mode == "variable" else ()
    index = {k: i for i, k in enumerate(keys)} if keys else None
    if spec.count_mode == "variable":
        _variable_chunks(spec, keys, ranks)
        _distinct(spec, ins + outs, ranks)
    inputs = tuple(_place(layout, counts, r, index) for r, layout in enumerate(ins))
    outputs = tuple(_place(layout, counts, r, index) for r, layout in enumerate(outs))
    sources: dict[ChunkKey, list[Place]] = {}
    for layout in inputs:
        for key, place in layout:
            sources.setdefault(key, []).append(place)
    for rank, layout in enumerate(outputs):
        for key, _ in layout:
            found = sources.get(key, [])
            if not found:
                raise SpecError(f"{spec.source}: output: chunk {key_text(key)} of rank {rank} has no source in any "
                                f"input (with {counted(ranks, 'rank')}, root {root})")
            if spec.op == "copy" and len(found) > 1:
                where = ", ".join(f"rank {p.rank}" for p in found)
                raise SpecError(f"{spec.source}: input: copy chunk {key_text(key)} has {len(found)} sources ({where}); "
                                f"a copy needs exactly one (with {counted(ranks, 'rank')}, root {root})")
    flows = _coalesce(outputs, sources, merge=not keys)
    return Instance(spec, ranks, root, count, itemsize, counts, inputs, outputs, flows, keys)


def _bounded(spec: CollectiveSpec, layouts: list[list[ChunkKey]], counts: dict[ChunkKey, int], itemsize: int,
             ranks: int) -> None:
    """Refuse a buffer past sizes.MAX_BYTES before any place is built: `show --count 1e23`
    printed a program no memory could hold, with offsets of 24 digits."""
    for rank, layout in enumerate(layouts):
        n = sum(counts[k] for k in layout) * itemsize
        if n > MAX_BYTES:
            raise SpecError(f"{spec.name}: a buffer of rank {rank % ranks} would hold {n} bytes, above the largest "
                            f"size, {format_bytes(MAX_BYTES)} (2**60 bytes)")


def _key_order(key: ChunkKey) -> tuple:
    """Chunk names by name, then by indices as numbers: c(2) before c(10)."""
    return (key[0], len(key), *key[1:])


def _variable_chunks(spec: CollectiveSpec, keys: tuple[ChunkKey, ...], ranks: int) -> None:
    """A call's counts are one per chunk and a count's last index is the rank
    it belongs to (its draws group by it): with no chunk a call has no counts
    (bench crashed sizing its buffers), and a negative index names no rank."""
    if not keys:
        raise SpecError(f"{spec.source}: count: 'variable' needs at least one chunk in input or output; with "
                        f"{counted(ranks, 'rank')} there is none")
    bad = next((k for k in keys if any(i < 0 for i in k[1:])), None)
    if bad is not None:
        raise SpecError(f"{spec.source}: count: 'variable' chunk indices must be >= 0 (a count's last index is the "
                        f"rank it belongs to); {key_text(bad)} is listed (with {counted(ranks, 'rank')})")


def _distinct(spec: CollectiveSpec, layouts: list[list[ChunkKey]], ranks: int) -> None:
    """With variable sizes a chunk's place is after the chunks before it in
    its buffer; a buffer listing one chunk twice would place it twice."""
    for rank, layout in enumerate(layouts):
        seen = set()
        for key in layout:
            if key in seen:
                raise SpecError(f"{spec.source}: count: 'variable' needs each buffer to list a chunk once; rank "
                                f"{rank % ranks} lists {key_text(key)} twice (with {counted(ranks, 'rank')})")
            seen.add(key)


def _coalesce(outputs, sources: dict[ChunkKey, list[Place]], merge: bool = True) -> tuple[Flow, ...]:
    """Turn output chunks into flows: neighbouring output chunks whose sources
    are neighbours at the same ranks merge into one, and outputs with the same
    sources share one flow (all-reduce becomes one flow of the whole buffer with
    R consumers). Empty chunks vanish. Without ``merge`` (variable sizes:
    neighbours grow and shrink apart, call by call) each chunk stays a flow."""
    runs: list[tuple[tuple[Place, ...], Place]] = []  # (sources, consumer place)
    for layout in outputs:
        current: tuple[tuple[Place, ...], Place] | None = None
        for key, place in layout:
            if place.count == 0:
                continue
            srcs = tuple(sorted(sources[key], key=lambda p: (p.rank, p.offset)))
            if current is not None and merge:
                prev_srcs, prev = current
                adjacent = prev.offset + prev.count == place.offset and len(prev_srcs) == len(srcs) and all(
                    a.rank == b.rank and a.offset + a.count == b.offset for a, b in zip(prev_srcs, srcs)
                )
                if adjacent:
                    merged = tuple(Place(a.rank, a.offset, a.count + b.count) for a, b in zip(prev_srcs, srcs))
                    current = (merged, Place(prev.rank, prev.offset, prev.count + place.count))
                    continue
            if current is not None:
                runs.append(current)
            current = (srcs, place)
        if current is not None:
            runs.append(current)
    grouped: dict[tuple, tuple[tuple[Place, ...], list[Place]]] = {}
    for srcs, consumer in runs:
        # Unmerged, the sources are the input places themselves (one list per
        # chunk), so their identities group them as their values would, and
        # without hashing each place's base (a variable place's is as long as
        # the chunks before it: quadratic per buffer).
        group = srcs if merge else tuple(map(id, srcs))
        grouped.setdefault(group, (srcs, []))[1].append(consumer)
    return tuple(Flow(srcs, tuple(consumers), consumers[0].count) for srcs, consumers in grouped.values())
