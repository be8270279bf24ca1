"""Bus bandwidth and latency against message size, one line per strategy and
baseline, from the rows `purlin bench --json` writes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from purlin_bench.base.errors import PurlinError
from purlin_bench.base.textfile import parse_json, read_text, write_with


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    text = read_text(path, PurlinError, "not a purlin bench result")
    data = parse_json(text, str(path), PurlinError, constants=False)
    rows = data.get("results") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "size" in r and "out_of_place" in r for r in rows):
        raise PurlinError(f"{path}: not a purlin bench result (expected 'results' rows with size and out_of_place)")
    _check_rows(rows, path)
    return rows


# What plot_rows reads of a row, as a JSON Schema: a row of another shape or
# with a negative size or time is one line naming it, not a KeyError or a
# plot with lines below zero.
_NUMBER = {"type": "number", "minimum": 0}
_SIDE = {"type": "object", "required": ["time", "bus_bw"],
         "properties": {"time": {"type": "number", "exclusiveMinimum": 0}, "bus_bw": _NUMBER,
                        "alg_bw": {"type": ["number", "null"], "minimum": 0}}}
_ROW = {"type": "object", "required": ["collective", "strategy", "size", "out_of_place"],
        "properties": {"collective": {"type": "string"}, "strategy": {"type": "string"},
                       "size": {"type": "integer", "minimum": 1}, "out_of_place": _SIDE,
                       "baselines": {"type": ["object", "null"],
                                     "additionalProperties": {"type": ["number", "null"], "minimum": 0}}}}


def _check_rows(rows: list[dict[str, Any]], path: str | Path) -> None:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(_ROW)
    for i, row in enumerate(rows):
        error = next(iter(validator.iter_errors(row)), None)
        if error is not None:
            field = "/".join(str(p) for p in error.absolute_path) or "row"
            raise PurlinError(f"{path}: results[{i}] {field}: {error.message}"[:300])


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
    # Through the one writer (textfile.write_with): a temp file renamed over
    # a regular file, streamed into a device or FIFO, never a rename over
    # one. savefig is given the format, since the handle has no extension.
    try:
        write_with(out, lambda handle: fig.savefig(handle, dpi=110, format=out.suffix.lower().lstrip(".")))
    finally:
        plt.close(fig)
