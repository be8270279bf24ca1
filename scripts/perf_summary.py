"""Summarise `purlin bench --json` files as the Markdown tables of
docs/performance.md (per collective: small-message latency, the geometric-mean
speed-up over each baseline, the worst ratio, % of the floor at >= 256 MiB).

    python3 scripts/perf_summary.py docs/perf/h200-8vr-float32.json [...]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def summarise(path: str) -> str:
    data = json.load(open(path))
    rows = defaultdict(list)
    for r in data["results"]:
        rows[(r["collective"], r["strategy"].split("(")[0])].append(r)
    lines = [
        f"`{data['command']}` ({data['environment'].get('gpu', 'cpu')}, driver {data['environment'].get('driver', '?')}, CUDA runtime {data['environment'].get('cuda_runtime', '?')})",
        "",
        "| collective | strategy | sizes | <= 64 KiB: max time (us) | geomean vs cupy | worst vs cupy (size) | % floor at >= 256 MiB | #wrong |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (collective, strategy), rs in sorted(rows.items()):
        small = [r["out_of_place"]["time"] for r in rs if r["size"] <= 65536]
        ratios = [(r["speedup"].get("cupy"), r["size"]) for r in rs if r["speedup"].get("cupy")]
        geo = statistics.geometric_mean(x for x, _ in ratios) if ratios else float("nan")
        worst = min(ratios) if ratios else (float("nan"), 0)
        big = [f"{r['roofline_pct']:.1f}" for r in rs if r["size"] >= 256 << 20 and r["roofline_pct"]]
        wrong = sum(r["out_of_place"]["nwrong"] + ((r["in_place"] or {}).get("nwrong") or 0) for r in rs)
        lines.append(
            f"| {collective} | {strategy} | {len(rs)} | {max(small):.2f} | {geo:.2f}x | {worst[0]:.2f}x ({worst[1]}) | {', '.join(big) or '-'} | {wrong} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(summarise(p) for p in sys.argv[1:]))
