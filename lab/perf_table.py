"""The tables of docs/performance.md, rendered from `purlin bench --json` files.

    python3 lab/perf_table.py                       # the committed results (CURRENT), both dtypes
    python3 lab/perf_table.py out-*.json            # your own run's files, one table per dtype in them
    python3 lab/perf_table.py --check docs/performance.md   # exit 1 unless the page holds these tables

Each table: one row per collective (the untuned default, as it ships)
against a baseline timed in the same process (``--baseline``, default
torch): its time and the baseline's at 64 KiB and below, the geometric mean
of the speed-ups over every size, the worst speed-up and its size, and the
share of the memcpy-derived floor at 256 MiB and up. A file's rows are
pooled with the other files of the same dtype; two files with the same
collective, dtype and size are an error (pool one sweep, not two runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = 64 << 10
LARGE = 256 << 20

# The newest default-against-torch sweep that covers every collective and
# dtype at 16 B-256 MiB (issue 16, fourth and fifth rounds, 2026-12-03/04):
# the default-each step, and the 256 MiB rows its time limit cut, timed alone.
CURRENT = {
    "float32": ["lab/perf/issue16/device-6/default-each-float32-*.json", "lab/perf/issue16/device-7/big-*-float32.json", "lab/perf/issue16/device-8/big-*-float32.json"],
    "bfloat16": ["lab/perf/issue16/device-6/default-each-bfloat16-*.json", "lab/perf/issue16/device-8/big-*-bfloat16.json"],
}


def current_files() -> list[Path]:
    return [p for globs in CURRENT.values() for g in globs for p in sorted(ROOT.glob(g))]


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def load_rows(paths: list[Path], baseline: str) -> dict[str, dict[str, list[dict]]]:
    """Rows by dtype, then collective; every row has the baseline."""
    rows: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    seen: dict[tuple, Path] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for r in data["results"]:
            key = (r["collective"], r["type"], r["size"])
            if key in seen:
                raise SystemExit(f"perf_table: {path} and {seen[key]} both have {key[0]} {key[1]} at {key[2]} B")
            seen[key] = path
            if not r["baselines"].get(baseline):
                raise SystemExit(f"perf_table: {path}: {key[0]} {key[1]} at {key[2]} B has no {baseline!r} time")
            rows[r["type"]][r["collective"]].append(r)
    return rows


def render(paths: list[Path], baseline: str = "torch") -> str:
    """One Markdown table per dtype, each followed by its pooled line."""
    out = []
    for dtype, by_collective in sorted(load_rows(paths, baseline).items(), key=lambda kv: kv[0] != "float32"):
        out += [
            f"**{dtype}**",
            "",
            f"| collective | default strategy | sizes (rows) | <= 64 KiB: us | <= 64 KiB: {baseline} us | geomean vs {baseline} | worst vs {baseline} (size) | % floor at 256 MiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        pooled = []
        for collective, rs in sorted(by_collective.items()):
            rs.sort(key=lambda r: r["size"])
            small = [r for r in rs if r["size"] <= SMALL]
            ours = [r["out_of_place"]["time"] for r in small]
            theirs = [r["baselines"][baseline] for r in small]
            ratios = [(r["baselines"][baseline] / r["out_of_place"]["time"], r["size"]) for r in rs]
            pooled += [x for x, _ in ratios]
            worst = min(ratios)
            strategies = sorted({r["strategy"].split("(")[0] for r in rs})
            big = [f"{r['roofline_pct']:.0f}" for r in rs if r["size"] >= LARGE and r.get("roofline_pct")]
            span = f"{_size(rs[0]['size'])}-{_size(rs[-1]['size'])} ({len(rs)})"
            out.append(
                f"| {collective} | {', '.join(strategies)} | {span} | {min(ours):.2f}-{max(ours):.2f} | {min(theirs):.2f}-{max(theirs):.2f} "
                f"| {statistics.geometric_mean(x for x, _ in ratios):.2f}x | {worst[0]:.2f}x ({_size(worst[1])}) | {', '.join(big) or '-'} |"
            )
        out += ["", f"All {len(pooled)} {dtype} rows: geometric mean {statistics.geometric_mean(pooled):.2f}x over {baseline}, worst {min(pooled):.2f}x.", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="bench --json files (default: the committed CURRENT ones)")
    ap.add_argument("--baseline", default="torch")
    ap.add_argument("--check", type=Path, help="a page that must hold every line of these tables")
    args = ap.parse_args(argv)
    text = render(args.files or current_files(), args.baseline)
    if args.check:
        page = args.check.read_text()
        missing = [line for line in text.splitlines() if line.strip() and line not in page]
        for line in missing:
            print(f"not in {args.check}: {line}", file=sys.stderr)
        return 1 if missing else 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
