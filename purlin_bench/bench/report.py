"""Print and save benchmark records: nccl-tests columns, JSON, CSV, summary."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path
from typing import Any, Iterable

from rich.table import Table

from purlin_bench.atomic import write_text_atomic
from purlin_bench.bench.measure import BenchRecord

JSON_SCHEMA = 1


def _fmt_time(us: float | None) -> str:
    return "-" if us is None else f"{us:.2f}" if us < 1000 else f"{us:.0f}"


def table(records: list[BenchRecord], title: str) -> Table:
    baselines = sorted({b for r in records for b in r.baselines})
    t = Table(title=title, title_justify="left", header_style="bold")
    for name in ("size (B)", "count", "type", "redop", "root"):
        t.add_column(name, justify="right")
    for side in ("out-of-place", "in-place"):
        t.add_column(f"{side}\ntime (us)", justify="right")
        t.add_column("algbw\n(GB/s)", justify="right")
        t.add_column("busbw\n(GB/s)", justify="right")
        t.add_column("#wrong", justify="right")
    t.add_column("strategy")
    for b in baselines:
        t.add_column(f"{b}\n(us)", justify="right")
        t.add_column(f"vs {b}", justify="right")
    t.add_column("% floor", justify="right")
    for r in records:
        cells = [str(r.size), str(r.count), r.type, r.redop, str(r.root)]
        for side in (r.out_of_place, r.in_place):
            if side is None:
                cells += ["n/a"] * 4
            else:
                wrong = f"[red]{side.nwrong}[/red]" if side.nwrong else "0"
                cells += [_fmt_time(side.time_us), f"{side.algbw:.2f}", f"{side.busbw:.2f}", wrong]
        cells.append(r.strategy)
        for b in baselines:
            speed = r.speedup(b)
            cells += [_fmt_time(r.baselines.get(b)), "-" if speed is None else f"{speed:.2f}x"]
        pct = r.roofline_pct()
        cells.append("-" if pct is None else f"{pct:.0f}%")
        t.add_row(*cells)
    return t


def summary(records: list[BenchRecord]) -> list[str]:
    """nccl-tests' closing line, and the geometric-mean speed-up per baseline."""
    lines = []
    if not records:
        return lines
    busbw = [r.out_of_place.busbw for r in records]
    wrong = sum(r.out_of_place.nwrong + (r.in_place.nwrong if r.in_place else 0) for r in records)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.3f} GB/s")
    for b in sorted({b for r in records for b in r.baselines}):
        ratios = [s for s in (r.speedup(b) for r in records) if s]
        if ratios:
            geo = statistics.geometric_mean(ratios)
            lines.append(f"# Speed-up vs {b:<8}: geometric mean {geo:.2f}x over {len(ratios)} sizes (min {min(ratios):.2f}x, max {max(ratios):.2f}x)")
    return lines


def json_row(r: BenchRecord) -> dict[str, Any]:
    """nccl-tests -J row shape, plus our fields."""

    def side(s):
        return None if s is None else {"time": s.time_us, "alg_bw": s.algbw, "bus_bw": s.busbw, "nwrong": s.nwrong}

    row = {"collective": r.collective, "size": r.size, "count": r.count, "type": r.type, "redop": r.redop, "root": r.root, "out_of_place": side(r.out_of_place), "in_place": side(r.in_place)}
    row.update(strategy=r.strategy, config=r.config, baselines=r.baselines, speedup={b: r.speedup(b) for b in r.baselines}, floor_us=r.floor_us, roofline_pct=r.roofline_pct())
    return row


def write_json(path: str | Path, records: Iterable[BenchRecord], environment: dict[str, Any], command: str) -> None:
    data = {"schema": JSON_SCHEMA, "command": command, "environment": environment, "results": [json_row(r) for r in records]}
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


CSV_FIELDS = ("collective", "size", "count", "type", "redop", "root", "strategy", "oop_time_us", "oop_algbw", "oop_busbw", "oop_nwrong", "ip_time_us", "ip_algbw", "ip_busbw", "ip_nwrong", "floor_us", "roofline_pct")


def write_csv(path: str | Path, records: Iterable[BenchRecord]) -> None:
    records = list(records)
    baselines = sorted({b for r in records for b in r.baselines})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(list(CSV_FIELDS) + [f"{b}_us" for b in baselines] + [f"speedup_{b}" for b in baselines])
    for r in records:
        ip = r.in_place
        row = [r.collective, r.size, r.count, r.type, r.redop, r.root, r.strategy, r.out_of_place.time_us, r.out_of_place.algbw, r.out_of_place.busbw, r.out_of_place.nwrong]
        row += [ip.time_us, ip.algbw, ip.busbw, ip.nwrong] if ip else ["", "", "", ""]
        row += [r.floor_us if r.floor_us is not None else "", r.roofline_pct() if r.roofline_pct() is not None else ""]
        row += [r.baselines.get(b, "") for b in baselines] + [r.speedup(b) or "" for b in baselines]
        writer.writerow(row)
    write_text_atomic(path, out.getvalue())
