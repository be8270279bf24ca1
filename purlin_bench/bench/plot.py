"""Bus bandwidth and latency against message size, one line per strategy and
baseline, from the rows `purlin bench --json` writes."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from purlin_bench.atomic import MODE, WriteError
from purlin_bench.errors import PurlinError
from purlin_bench.textfile import read_text


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    text = read_text(path, PurlinError, "not a purlin bench result")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PurlinError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
    rows = data.get("results") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "size" in r and "out_of_place" in r for r in rows):
        raise PurlinError(f"{path}: not a purlin bench result (expected 'results' rows with size and out_of_place)")
    return rows


def plot_rows(rows: list[dict[str, Any]], out: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        raise PurlinError("nothing to plot: no results")
    lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)  # label -> (size, time us, busbw)
    for row in rows:
        label = f"{row['collective']} {row['strategy'].split('(')[0]}"
        oop = row["out_of_place"]
        lines[label].append((row["size"], oop["time"], oop["bus_bw"]))
        factor = oop["bus_bw"] / oop["alg_bw"] if oop.get("alg_bw") else 1.0
        for name, us in (row.get("baselines") or {}).items():
            algbw = row["size"] / (us * 1e-6) / 1e9 if us else 0.0
            lines[f"{row['collective']} baseline {name}"].append((row["size"], us, algbw * factor))
    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for label, points in sorted(lines.items()):
        points.sort()
        sizes = [p[0] for p in points]
        style = "--" if "baseline" in label else "-"
        bw_ax.plot(sizes, [p[2] for p in points], style, marker=".", label=label)
        lat_ax.plot(sizes, [p[1] for p in points], style, marker=".", label=label)
    for ax, ylabel in ((bw_ax, "bus bandwidth (GB/s)"), (lat_ax, "time per call (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size S (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    lat_ax.set_yscale("log")
    bw_ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    # Written beside the target and renamed, as atomic.py does for text: a
    # reader never sees half an image, a failure leaves no temp file, and the
    # mode is atomic.MODE whatever the umask (savefig's open() follows it).
    tmp = out.with_name(f".{out.name}.tmp{out.suffix}")
    try:
        fig.savefig(tmp, dpi=110)
        os.chmod(tmp, MODE)
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteError(f"{out}: cannot write: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
