"""Issue 31's target over `purlin bench --json` files of the -v collectives: per
collective and distribution, the geometric-mean speed-up over torch and the rows
under 0.9x; then all rows together (the target: >= 1.2x, none under 0.9x), and a
Markdown table of each row's time and torch's, for docs/performance.md.

    python3 lab/scripts/v_target.py FILE.json [...]

The files' rows are pooled (one sweep split over several commands); a row found
twice is an error, as in perf_summary.py.
"""

from __future__ import annotations

import json
import math
import sys

from purlin_bench.base.sizes import format_bytes

FLOOR = 0.9  # no row under this ratio to torch
TARGET = 1.2  # the geometric mean over every row


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(paths: list[str]) -> None:
    rows: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    for path in paths:
        data = json.load(open(path))
        env = data["environment"]
        print(f"- `{data['command']}` ({env.get('gpu', 'cpu')}, driver {env.get('driver', '?')})")
        for r in data["results"]:
            key = (r["collective"], r.get("distribution") or env.get("counts", "?"))
            torch = r["baselines"].get("torch")
            if torch is None:
                sys.exit(f"v_target: {path}: {key[0]} at {r['size']} B has no torch baseline")
            if r["size"] in rows.setdefault(key, {}):
                sys.exit(f"v_target: {key[0]} {key[1]} at {r['size']} B is in two files")
            rows[key][r["size"]] = (r["out_of_place"]["time"], torch)
    everything = []
    print("\n| collective | counts | geomean | rows under 0.9x (size: ratio) |\n|---|---|---|---|")
    for (name, dist), by_size in sorted(rows.items()):
        ratios = {s: torch / t for s, (t, torch) in sorted(by_size.items())}
        everything += ratios.values()
        under = ", ".join(f"{format_bytes(s)}: {x:.2f}" for s, x in ratios.items() if x < FLOOR) or "none"
        print(f"| {name} | {dist} | {_geomean(list(ratios.values())):.2f}x ({len(ratios)} rows) | {under} |")
    low = sum(x < FLOOR for x in everything)
    g = _geomean(everything)
    print(f"\nAll {len(everything)} rows: {g:.2f}x torch in geometric mean (target {TARGET}x: "
          f"{'met' if g >= TARGET else 'missed'}), {low} under {FLOOR}x (target none).")
    for (name, dist), by_size in sorted(rows.items()):
        sizes = sorted(by_size)
        print(f"\n{name}, {dist}: us (torch)\n\n| " + " | ".join(format_bytes(s) for s in sizes) + " |")
        print("|" + "---|" * len(sizes))
        print("| " + " | ".join(f"{t:.3g} ({torch:.3g})" for t, torch in (by_size[s] for s in sizes)) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
