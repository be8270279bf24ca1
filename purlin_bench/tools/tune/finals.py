"""After a study: its fastest configurations and the default, timed again
side by side, and the guard that keeps the default where a winner loses.

A study ranks each configuration by one measurement, so its best is partly
the luckiest draw, and a plan must not lose to the default it replaces.
The finalists and the default therefore take turns at every probe size of
the bucket (MeasurementService.compare, the path bench uses), over
``rounds`` rounds; the winner is the best geometric mean of its per-probe
medians, the default stays unless beaten by more than ``margin``, and a
winner slower than the default by more than LOSS_BOUND at any probe gives
way to it. The entry's times come from the same rounds (the driver times
the baseline beside the default once more, for the plan's record).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Protocol, Sequence

from purlin_bench.base.config import RunConfig
from purlin_bench.procs.errors import DistError
from purlin_bench.base.errors import PurlinError
from purlin_bench.tools.tune.sweep import Bucket, format_bytes

# How much slower than the default a plan may be at any probe size of its
# bucket: issue 13 asks that no size fall below 0.98x the default.
LOSS_BOUND = 0.02
# A finalist must beat the default by this much in the same rounds.
MARGIN = 0.02
FINALISTS = 3


class SideBySide(Protocol):
    def side_by_side(self, configs: Sequence[RunConfig], bucket: Bucket) -> dict[RunConfig, tuple[float, ...]]: ...

    def probe_nbytes(self, bucket: Bucket) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Final:
    """What a plan entry records: its configuration, its time and the
    default's at the lower edge (the entry's measured size), and why the
    study's winner was set aside for the default, if it was."""

    config: RunConfig
    time_us: float
    default_us: float | None
    note: str | None = None


def pick(
    bench: SideBySide, bucket: Bucket, ranked: Sequence[RunConfig], default: RunConfig | None, rounds: int
) -> Final:
    """The entry for ``bucket`` from the study's configurations fastest
    first (``ranked``) and its measured default."""
    # rounds 0 (--confirm 0): the study's best stands, only guarded.
    finalists = FINALISTS if rounds > 0 else 1
    candidates = list(dict.fromkeys([*ranked[:finalists], *([default] if default is not None else [])]))
    if not candidates:
        raise PurlinError(f"no configuration to pick from at {bucket.text()}")
    runs, failed = _rounds(bench, bucket, candidates, max(1, rounds))
    medians = {
        c: tuple(statistics.median(run[i] for run in runs[c]) for i in range(len(runs[c][0])))
        for c in candidates
        if runs[c]
    }
    if not medians:
        raise PurlinError(f"every finalist failed when timed again at {bucket.text()}: {'; '.join(failed.values())}")
    score = {c: statistics.geometric_mean(m) for c, m in medians.items()}
    best = min(medians, key=lambda c: (score[c], candidates.index(c)))
    base = medians.get(default) if default is not None else None
    note = None
    if ranked and ranked[0] in failed and ranked[0] != best:
        note = f"{ranked[0].text()} failed when timed again: {failed[ranked[0]]}"
    if base is None:
        return Final(best, medians[best][0], None, note)
    if best != default and score[default] <= score[best] * (1 + MARGIN):
        best = default
    if best != default:
        mine = medians[best]
        worst = min(range(len(mine)), key=lambda i: base[i] / mine[i])
        if base[worst] / mine[worst] < 1 - LOSS_BOUND:
            sizes = [format_bytes(n) for n in bench.probe_nbytes(bucket)]
            note = f"{best.text()} was {base[worst] / mine[worst]:.2f}x the default's speed at {sizes[worst]}"
            best = default
    return Final(best, medians[best][0], base[0], note)


def _rounds(
    bench: SideBySide, bucket: Bucket, candidates: list[RunConfig], rounds: int
) -> tuple[dict[RunConfig, list[tuple[float, ...]]], dict[RunConfig, str]]:
    """Every candidate's probe times, ``rounds`` times, all candidates side
    by side each round. A candidate that fails is dropped with its reason
    (it ran in its trial: a failure now is news, not fatal)."""
    runs: dict[RunConfig, list[tuple[float, ...]]] = {c: [] for c in candidates}
    failed: dict[RunConfig, str] = {}
    for _ in range(rounds):
        live = [c for c in candidates if c not in failed]
        if not live:
            break
        try:
            times = bench.side_by_side(live, bucket)
        except DistError:
            raise  # a lost rank ends the run
        except PurlinError:
            times = {}
            for c in live:  # find which one fails; the rest still count this round
                try:
                    times.update(bench.side_by_side([c], bucket))
                except DistError:
                    raise
                except PurlinError as exc:
                    failed[c] = " ".join(str(exc).split())
        for c, t in times.items():
            if all(math.isfinite(x) and x > 0 for x in t):
                runs[c].append(t)
    return runs, failed
