"""push-parity: push, with parity scratch (program/model.py) where it drops
the call protocol's ready/done flags: a reduction whose every rank both
produces for and consumes from every peer (all-reduce, reduce-scatter)
writes only its peers' scratch and waits on each of them, so a call is one
flag exchange, where push needs three (ready, data, done). Elsewhere (copies,
a rooted reduce, sizes per call) it is push as it is."""

from __future__ import annotations

from purlin_bench.strategies import push
from purlin_bench.strategies.base import Strategy

STRATEGY = Strategy(
    "push-parity",
    "push into scratch halves alternating by call, without ready/done flags where that is sound",
    push.emit,
    parity=True,
)
