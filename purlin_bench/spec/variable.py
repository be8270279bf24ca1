"""Variable sizes in the semantics: one call's counts, its layout and reference.

A ``count: variable`` spec (all-gather-v, reduce-scatter-v, all-to-all-v, or a
user's) gives every chunk its size per call. A call's counts are one whole
number per chunk name, in the order of :attr:`Instance.count_keys` (sorted by
name, then indices: ``c(0), c(1), ...`` per source rank for all-gather-v, per
destination rank for reduce-scatter-v; ``c(0, 0), c(0, 1), ...``, row-major
per (source, destination) pair for all-to-all-v). Buffers are the
concatenation of their chunks at this call's sizes (packed, as MPI's and
torch's ``*v`` calls lay them out with displacements the prefix sums of the
counts); what lies past a buffer's last chunk is not the call's.

The instance is built for a capacity (its ``count``): every count may be
0..capacity, and the buffers hold every chunk at capacity, so any counts fit.
:func:`check_counts` says so, or what is wrong, in one line before anything
runs; :func:`at_counts` is the fixed-size instance of one call, whose
reference (:meth:`Instance.reference`) is the call's expected outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from purlin_bench.base.errors import CountsError, PurlinError
from purlin_bench.spec.instance import Instance, _coalesce, _place, key_text

# How a check or bench draws a call's counts (``--counts``):
#   uniform  every count uniform in 0..capacity
#   skewed   as MoE routing is: the ranks (a count's last index) get Zipf
#            weights 1, 1/2, 1/3, ... in a random order, each count is its
#            rank's weight times a uniform draw, times the capacity
#   hot      one rank takes everything: its counts at capacity, every other 0
#   sparse   about half the counts 0, the rest uniform
DISTRIBUTIONS = ("uniform", "skewed", "hot", "sparse")


def distribution_option(text: str | None, specs, allowed: Sequence[str] = DISTRIBUTIONS,
                        default: str = "uniform") -> str:
    """The command line's --counts: how a call's counts are drawn (one of ``allowed``),
    ``default`` where it was not given; refused where no collective asked for (``specs``)
    takes its sizes per call, so that it is never silently ignored."""
    if text is None:
        return default
    word = text.strip()
    if word not in allowed:
        raise PurlinError(f"unknown --counts '{text}' (known: {', '.join(allowed)})")
    if not any(spec.variable for spec in specs):
        raise PurlinError("--counts is for collectives whose sizes come per call (count: variable); "
                          "none of those asked for is one")
    return word


def check_counts(inst: Instance, counts: Sequence[int]) -> tuple[int, ...]:
    """``counts`` as ints, or a CountsError (one line) naming the first
    wrong one: one count per chunk name, each from 0 to the capacity."""
    if not inst.variable:
        raise CountsError(f"{inst.spec.name} has fixed sizes; it takes no per-call counts")
    values = list(counts)
    if len(values) != len(inst.count_keys):
        raise CountsError(f"{inst.spec.name} at {inst.ranks} ranks takes {len(inst.count_keys)} counts (one per "
                          f"chunk: {_names(inst)}), got {len(values)}")
    out = []
    for key, value in zip(inst.count_keys, values):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise CountsError(f"{inst.spec.name}: the count of {key_text(key)} is {value!r}, not a whole number")
        if not 0 <= int(value) <= inst.count:
            raise CountsError(f"{inst.spec.name}: the count of {key_text(key)} is {int(value)}, outside 0..{inst.count}"
                              " (the capacity its buffers hold)")
        out.append(int(value))
    return tuple(out)


def _names(inst: Instance) -> str:
    names = [key_text(k) for k in inst.count_keys]
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {names[-1]}"


def at_counts(inst: Instance, counts: Sequence[int]) -> Instance:
    """The fixed-size instance of one call: every chunk at its count, packed
    in its buffers. Its buffers are what the call fills (a prefix of each
    capacity buffer); its reference is the call's expected output."""
    n = check_counts(inst, counts)
    sizes = dict(zip(inst.count_keys, n))
    inputs = tuple(_place([k for k, _ in layout], sizes, r) for r, layout in enumerate(inst.inputs))
    outputs = tuple(_place([k for k, _ in layout], sizes, r) for r, layout in enumerate(inst.outputs))
    sources: dict = {}
    for layout in inputs:
        for key, place in layout:
            sources.setdefault(key, []).append(place)
    flows = _coalesce(outputs, sources, merge=False)
    return Instance(inst.spec, inst.ranks, inst.root, inst.count, inst.itemsize, sizes, inputs, outputs, flows)


def expected_outputs(inst: Instance, inputs: Sequence[np.ndarray], redop: str | None,
                     counts: Sequence[int]) -> list[np.ndarray]:
    """What each rank's output buffer starts with after a call with
    ``counts`` on ``inputs`` (capacity buffers; only the call's prefix of each
    is read): the reference semantics of one variable-size call."""
    call = at_counts(inst, counts)
    used = [x[:n] for x, n in zip(inputs, call.in_counts)]
    return call.reference(used, redop)


def total(inst: Instance, counts: Sequence[int]) -> int:
    """Elements the call's counts add up to (bench.size's ``total``)."""
    return sum(check_counts(inst, counts))


def counts_for_total(inst: Instance, total: int, distribution: str, rng: np.random.Generator) -> tuple[int, ...]:
    """One call's counts adding up to ``total`` exactly, shaped by
    ``distribution`` (a draw at a large capacity, scaled; the remainder goes
    to the largest fractions): what a bench row of size S times every call
    with. ``inst`` gives the chunk names; its capacity is not used."""
    shape = draw_counts(replace(inst, count=1 << 20), distribution, rng)
    weights = np.array(shape, dtype=np.float64)
    if not weights.sum():
        weights[...] = 1.0  # every draw 0 (a sparse draw can be): spread evenly
    exact = weights / weights.sum() * total
    counts = np.floor(exact).astype(np.int64)
    left = int(total - counts.sum())
    for k in np.argsort(-(exact - counts), kind="stable")[:left]:
        counts[k] += 1
    return tuple(int(c) for c in counts)


def draw_counts(inst: Instance, distribution: str, rng: np.random.Generator) -> tuple[int, ...]:
    """One call's counts from ``distribution`` (see DISTRIBUTIONS), each in
    0..capacity. "A rank" is a count's last index (the source of
    all-gather-v, the destination of reduce-scatter-v and all-to-all-v); a
    chunk without an index is rank 0's."""
    cap, keys = inst.count, inst.count_keys
    if distribution not in DISTRIBUTIONS:
        raise CountsError(f"unknown counts distribution '{distribution}' (known: {', '.join(DISTRIBUTIONS)})")
    group = [int(k[-1]) if len(k) > 1 else 0 for k in keys]
    # Draws pick among the ranks that occur, not 0..max(index): arrays stay as
    # long as the count vector (c(r * 10**8) shuffled 800 MB a draw), and a hot
    # rank always has counts (with c(2 * r) an odd pick zeroed every count and
    # the row went uniform). The built-ins' ranks are 0..R-1, so their draws
    # for a seed are what they were before this.
    ranks = sorted(set(group)) or [0]
    if distribution == "uniform":
        return tuple(int(x) for x in rng.integers(0, cap + 1, size=len(keys)))
    if distribution == "sparse":
        drawn = rng.integers(0, cap + 1, size=len(keys))
        return tuple(int(x) if keep else 0 for x, keep in zip(drawn, rng.random(len(keys)) < 0.5))
    if distribution == "hot":
        hot = ranks[int(rng.integers(0, len(ranks)))]
        return tuple(cap if g == hot else 0 for g in group)
    order = rng.permutation(len(ranks))  # skewed: Zipf weights over the ranks, in random order
    weight = dict(zip(ranks, 1.0 / (1.0 + order.astype(np.float64))))
    draws = rng.random(len(keys))
    return tuple(int(min(cap, np.floor(cap * weight[g] * u + 0.5))) for g, u in zip(group, draws))
