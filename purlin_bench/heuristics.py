"""The untuned default: ``--strategy auto`` picks a configuration from the
spec's dataflow alone (never its name). Tuned plans must beat this.

The rules come from the first H200 sweep of every strategy over 8 virtual
ranks (docs/performance.md, "strategy survey"):

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

The datapath parameters (:func:`default_config`) come from the later datapath
survey (docs/performance.md, "How the defaults got here").
"""

from __future__ import annotations

from purlin_bench.config import RunConfig
from purlin_bench.planner import applicable
from purlin_bench.spec.instance import Instance


def default_strategy(inst: Instance) -> str:
    usable = {name for name, why in applicable(inst).items() if why is None}
    if inst.op == "reduce":
        spread = len(inst.flows) >= inst.ranks and all(len(f.consumer_ranks()) == 1 for f in inst.flows)
        choice = "direct" if spread or "two-shot" not in usable else "two-shot"
    else:
        source_ranks = {p.rank for f in inst.flows for p in f.sources}
        fans_out = any(len(f.consumer_ranks()) > 1 for f in inst.flows)
        if len(source_ranks) > 1:
            choice = "push"
        else:
            choice = "two-shot" if fans_out else "direct"
    return choice if choice in usable else sorted(usable)[0]


# Copy engines beat the SM copy loop once every flow is this large (H200,
# docs/perf/survey: with 2 MiB flows they ran at 0.8-1.0x the speed of SM
# unroll=4; with 8 MiB flows 1.1-1.2x SM unroll=2; with 32 MiB and up at
# 99-102% of the floor against SM unroll=4's 96%).
CE_MIN_FLOW_BYTES = 4 << 20
# Most channels the default gives a rank: one per flow it sends (all-to-all).
_MAX_CHANNELS = 8


def default_config(inst: Instance, backend: str = "cupy", fused: bool = True) -> RunConfig:
    """A sensible configuration for ``inst`` without measuring anything.
    ``fused``: every rank runs in one launch on one GPU (virtual ranks), the
    layout the copy-engine datapath needs."""
    strategy = default_strategy(inst)
    plan_params = {"channels": 1, "slice_bytes": 0}
    exec_params: dict[str, int | str] = {}
    copy = inst.op != "reduce"
    if strategy == "push" and copy:
        # A rank sending several flows gives each its own channel, so they
        # run side by side rather than as a chain of ops.
        sent = max(inst.flows_sent().values(), default=1)
        plan_params["channels"] = max(1, min(_MAX_CHANNELS, sent))
    if backend == "cupy" and copy:
        # Copies have no reduction's loads to batch: 4 vectors in flight
        # per thread take single-consumer copies from 84% to 96% of the
        # floor; reductions keep 2, which is 0.5 us faster at small sizes.
        exec_params["unroll"] = 4
        single = all(len(f.consumer_ranks()) == 1 for f in inst.flows)
        smallest = min((f.count for f in inst.flows), default=0) * inst.itemsize
        if fused and strategy == "push" and single and smallest >= CE_MIN_FLOW_BYTES:
            plan_params["channels"] = 1
            exec_params = {"datapath": "ce"}
    return RunConfig.make(strategy, plan_params, exec_params)
