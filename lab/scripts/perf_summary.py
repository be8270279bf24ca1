"""Summarise `purlin bench --json` files as the Markdown tables of
lab/notebook/performance-history.md (per collective and strategy: small-message latency and
its ratio to the baseline's, the geometric-mean speed-up over the baseline,
the worst ratio, % of the floor at >= 256 MiB).

    python3 lab/scripts/perf_summary.py [--baseline NAME] FILE.json [...]

``--baseline`` (default cupy) names the baseline the speed-ups are over, as
bench's --baseline does; the files' rows are pooled, so one table can cover
the files of one sweep split over several commands.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

from purlin_bench.base.sizes import format_bytes

SMALL = 64 << 10
LARGE = 256 << 20


def summarise(paths: list[str], baseline: str) -> str:
    rows = defaultdict(list)
    sources, seen = [], {}
    for path in paths:
        data = json.load(open(path))
        env = data["environment"]
        sources.append(f"- `{data['command']}` ({env.get('gpu', 'cpu')}, driver {env.get('driver', '?')}, CUDA runtime {env.get('cuda_runtime', '?')})")
        for r in data["results"]:
            key = (r["collective"], r["type"], r["strategy"].split("(")[0], r["size"])
            if key in seen:
                sys.exit(f"perf_summary: {path} and {seen[key]} both have {key[0]} {key[1]} {key[2]} at {r['size']} B: pool the files of one sweep, not two runs")
            seen[key] = path
            if baseline not in r["baselines"]:
                sys.exit(f"perf_summary: {path} has no baseline {baseline!r} (it has: {', '.join(r['baselines']) or 'none'}); pass --baseline")
            rows[key[:3]].append(r)
    lines = [*sources, ""]
    lines += [
        f"| collective | dtype | strategy | sizes | <= 64 KiB: time (us) | <= 64 KiB: worst time / {baseline}'s | geomean vs {baseline} | worst vs {baseline} (size) | % floor at >= 256 MiB | #wrong |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    pooled = []
    for (collective, dtype, strategy), rs in sorted(rows.items()):
        rs.sort(key=lambda r: r["size"])
        small = [r for r in rs if r["size"] <= SMALL]
        times = [r["out_of_place"]["time"] for r in small]
        over = [r["out_of_place"]["time"] / r["baselines"][baseline] for r in small if r["baselines"].get(baseline)]
        ratios = [(r["speedup"][baseline], r["size"]) for r in rs if r["speedup"].get(baseline)]
        pooled += [x for x, _ in ratios]
        geo = statistics.geometric_mean(x for x, _ in ratios) if ratios else float("nan")
        worst = min(ratios) if ratios else (float("nan"), 0)
        big = [f"{r['roofline_pct']:.0f}" for r in rs if r["size"] >= LARGE and r["roofline_pct"]]
        wrong = sum(r["out_of_place"]["nwrong"] + ((r["in_place"] or {}).get("nwrong") or 0) for r in rs)
        span = f"{format_bytes(rs[0]['size'])}-{format_bytes(rs[-1]['size'])} ({len(rs)})"
        lines.append(
            f"| {collective} | {dtype} | {strategy} | {span} | {f'{min(times):.2f}-{max(times):.2f}' if times else '-'} | {f'{max(over):.2f}x' if over else '-'} "
            f"| {geo:.2f}x | {worst[0]:.2f}x ({format_bytes(worst[1])}) | {', '.join(big) or '-'} | {wrong} |"
        )
    if pooled:
        lines += ["", f"Every row pooled: geometric mean {statistics.geometric_mean(pooled):.2f}x over {baseline} ({len(pooled)} rows), worst {min(pooled):.2f}x."]
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="cupy")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    print(summarise(args.files, args.baseline))
