"""CSV: one row per size bucket, parameters in columns of their own (empty
where a configuration does not set one), for spreadsheets and dataframes."""

from __future__ import annotations

import csv
import io

from purlin_bench.plans import PlanArtifact

# Parameters with a column of their own; any other goes to other_params.
PARAM_COLUMNS = ("slice_bytes", "channels", "blocks", "threads", "datapath", "unroll")
COLUMNS = (
    "collective", "dtype", "counts", "ranks", "gpu_type", "layout", "backend", "timing",
    "min_bytes", "max_bytes", "strategy", *PARAM_COLUMNS, "other_params",
    "time_us", "busbw_gbps", "default_time_us", "baseline_time_us", "speedup_vs_default", "speedup_vs_baseline",
)  # fmt: skip


def render(plan: PlanArtifact, source: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    fp = plan.fingerprint
    for e in plan.entries:
        params = {**dict(e.config.plan_params), **dict(e.config.exec_params)}
        other = ";".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in PARAM_COLUMNS)
        writer.writerow([
            plan.collective, plan.dtype, _blank(plan.counts), plan.ranks, fp.gpu_type, fp.layout, plan.backend,
            plan.timing,
            e.min_bytes, _blank(e.max_bytes), e.config.strategy, *(_blank(params.get(k)) for k in PARAM_COLUMNS), other,
            f"{e.time_us:.6g}", f"{e.busbw_gbps:.6g}", _number(e.default_time_us), _number(e.baseline_time_us),
            _number(e.speedup_over_default()), _number(e.speedup_over_baseline()),
        ])  # fmt: skip
    return out.getvalue()


def _blank(value: object) -> object:
    return "" if value is None else value


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
