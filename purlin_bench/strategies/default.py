"""The untuned default: ``--strategy auto`` picks a configuration from the
spec's dataflow alone (never its name). Tuned plans must beat this.

The rules come from the first H200 sweep of every strategy over 8 virtual
ranks (docs/decisions.md, D7):

* A reduction whose flows each have one consumer, with at least one flow per
  rank (reduce-scatter), is already spread over the ranks: ``direct``, each
  consumer pulling its part once (3.2 us small, 78% of the floor at 256 MiB).
* Other reductions (all-reduce, reduce) take ``two-shot``: every rank reduces
  one part and writes it to every consumer, each input read once, each output
  written once (85% of the floor for all-reduce at 256 MiB; direct re-reads
  every input once per consumer and reaches 23%).
* A copy whose sources all sit on one rank is pulled by the consumers,
  ``direct``, so that every rank's blocks work (scatter: each consumer pulls
  its own chunk). If its flows fan out (broadcast), ``direct`` would read the
  source once per consumer (63% of the floor); ``two-shot`` splits the source
  over the ranks, each reading its part once and writing it to every consumer.
  With many source ranks (all-gather, gather, all-to-all) each source pushes
  its chunk to all consumers in one step, ``push`` (2.9 us against direct's
  9 us for a small all-gather; 86% of the floor at 256 MiB).

The datapath parameters come from the later datapath survey
(docs/decisions.md, D1-D6) and live with each
backend (Backend.default_config): this module chooses strategies only.
"""

from __future__ import annotations

from purlin_bench.base.config import RunConfig
from purlin_bench.spec.instance import Instance


# With ranks as processes, an all-reduce or reduce-scatter whose every rank
# holds at least one element a rank and at most this many bytes takes
# push-parity: one flag exchange a call where two-shot and direct wait on
# ready, data and done (D47; larger sizes were not measured, and parity
# scratch doubles push's).
PROCS_PARITY_MAX_BYTES = 256 << 10


def default_strategy(inst: Instance, processes: bool = False) -> str:
    """The default strategy for ``inst``; ``processes``: its ranks are processes (not virtual ranks)."""
    if inst.op == "reduce":
        spread = len(inst.flows) >= inst.ranks and all(len(f.consumer_ranks()) == 1 for f in inst.flows)
        if processes and _parity_pays(inst, spread):
            return "push-parity"
        return "direct" if spread else "two-shot"
    source_ranks = {p.rank for f in inst.flows for p in f.sources}
    fans_out = any(len(f.consumer_ranks()) > 1 for f in inst.flows)
    if len(source_ranks) > 1:
        return "push"
    return "two-shot" if fans_out else "direct"


# Most channels the default gives a rank: one per flow it sends (all-to-all).
_MAX_CHANNELS = 8


# A variable collective's channel per flow splits a rank's blocks evenly
# among flows whose sizes are not even (skewed counts leave most idle): from
# a rank's input of this many bytes at capacity, one channel whose every op
# all the rank's blocks share (D45; D50 moved it from 4 MiB, where skewed
# all-to-all-v at 512 KiB-2 MiB S ran 1.6-2.5x slower on eight channels).
VARIABLE_ONE_CHANNEL_BYTES = 5 << 19


def _parity_pays(inst: Instance, spread: bool) -> bool:
    """Whether ``inst`` is a small reduction at fixed sizes that every rank
    feeds, received by every rank (all-reduce) or ``spread`` one flow a rank
    (reduce-scatter), at least one element a rank (D47). A rooted reduce is
    neither: unmeasured, it keeps two-shot."""
    everyone = set(range(inst.ranks))
    fed = all({p.rank for p in f.sources} == everyone for f in inst.flows)
    received = spread or all(set(f.consumer_ranks()) == everyone for f in inst.flows)
    small = max(inst.in_counts) * inst.itemsize <= PROCS_PARITY_MAX_BYTES
    return not inst.variable and fed and received and small and min(inst.in_counts) >= inst.ranks


def untuned_config(inst: Instance, processes: bool = False) -> RunConfig:
    """The strategy and strategy parameter of the untuned default for
    ``inst`` (``processes``: its ranks are processes), without measuring
    anything. Each backend then adds its own datapath defaults (Backend.default_config)."""
    strategy = default_strategy(inst, processes)
    plan_params = {"channels": 1, "slice_bytes": 0}
    if strategy == "push" and inst.op != "reduce":
        # A rank sending several flows gives each its own channel, so they
        # run side by side rather than as a chain of ops.
        sent = max(inst.flows_sent().values(), default=1)
        plan_params["channels"] = max(1, min(_MAX_CHANNELS, sent))
        if inst.variable and max(inst.in_counts) * inst.itemsize >= VARIABLE_ONE_CHANNEL_BYTES:
            plan_params["channels"] = 1  # D45: uneven flows share one list's blocks instead of idling theirs
    return RunConfig.make(strategy, plan_params)
