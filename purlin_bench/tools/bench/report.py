"""Print and save benchmark records: nccl-tests columns, JSON, CSV, summary."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable

from rich.markup import escape
from rich.console import Group
from rich.table import Table
from rich.text import Text

from purlin_bench.base.textfile import write_output
from purlin_bench.tools.bench.measure import BenchRecord

JSON_SCHEMA = 1


def _fmt_time(us: float | None) -> str:
    return "-" if us is None else f"{us:.2f}" if us < 1000 else f"{us:.0f}"


# Fixed column widths: rows are printed one by one as they are measured,
# each its own headerless table, and they line up only if no width depends on
# the data. The strategy is free-width, so it goes last (or on its own line).
# Each column is (name, unit line, width); the compact layout (size, count and
# both sides) is 80 columns wide exactly, the terminal a newcomer has.
_LEAD = (("size", "(B)", 10), ("count", "", 9))
_KIND = (("type", "", 8), ("redop", "", 5), ("root", "", 4))
_SIDE = (("time", "(us)", 8), ("algbw", "(GB/s)", 6), ("busbw", "(GB/s)", 6), ("#wrong", "", 6))
_EXTRA_MIN = 24  # what the strategy column needs at least to stay readable
_SIDES = ("out-of-place", "in-place")


class TableLayout:
    """The terminal's table, printed a row at a time.

    Full width holds nccl-tests' columns, the baselines, the floor and the
    strategy; below that (an 80- or 100-column terminal) the compact layout
    keeps size, count and both sides, names type, redop and root in the
    title, and moves strategy, baselines and floor to a dim line of their own
    under each row. The header says each column's unit, and which columns
    are out of place and which in place on a line of its own above them (a
    header cell as wide as "out-of-place" would not fit 80 columns).
    """

    def __init__(self, baselines: tuple[str, ...], width: int):
        self.baselines = baselines
        sides = [col for _ in _SIDES for col in _SIDE]
        extra = [col for b in baselines for col in ((b, "(us)", max(9, len(b))), (f"vs {b}", "", max(9, len(b) + 3)))]
        self.full_columns = [*_LEAD, *_KIND, *sides, *extra, ("% floor", "", 7)]
        need = sum(w + 1 for _, _, w in self.full_columns) + _EXTRA_MIN
        self.compact = width < need
        self.columns = [*_LEAD, *sides] if self.compact else self.full_columns

    def _table(self, show_header: bool) -> Table:
        t = Table(show_header=show_header, header_style="bold", box=None, pad_edge=False, padding=(0, 0, 0, 1))
        for name, unit, w in self.columns:
            t.add_column(f"{name}\n{unit}" if unit else name, justify="right", width=w, no_wrap=True)
        if not self.compact:
            t.add_column("strategy", min_width=_EXTRA_MIN)
        return t

    def header(self) -> Group:
        """The side labels over their columns, then the header cells."""
        first = len(_LEAD) + (0 if self.compact else len(_KIND))
        starts, at = [], 0
        for i, (_, _, w) in enumerate(self.columns):
            starts.append(at + (1 if i else 0))
            at += w + (1 if i else 0)
        line = ""
        for k, label in enumerate(_SIDES):
            lo = starts[first + k * len(_SIDE)]
            hi = starts[first + (k + 1) * len(_SIDE) - 1] + _SIDE[-1][2]
            line = line.ljust(lo) + label.center(hi - lo)
        return Group(Text(line.rstrip(), style="bold"), self._table(show_header=True))

    def row(self, r: BenchRecord) -> list[Any]:
        """The renderables for one record: its row, and in the compact
        layout the strategy line."""
        cells = [str(r.size), str(r.count)]
        if not self.compact:
            cells += [r.type, r.redop, str(r.root)]
        for side in (r.out_of_place, r.in_place):
            if side is None:
                cells += ["n/a"] * 4
            else:
                wrong = f"[red]{side.nwrong}[/red]" if side.nwrong else "0"
                cells += [_fmt_time(side.time_us), f"{side.algbw:.2f}", f"{side.busbw:.2f}", wrong]
        extras = []
        for b in self.baselines:
            speed = r.speedup(b)
            extras += [_fmt_time(r.baselines.get(b)), "-" if speed is None else f"{speed:.2f}x"]
        pct = r.roofline_pct()
        floor = "-" if pct is None else f"{pct:.0f}%"
        t = self._table(show_header=False)
        if self.compact:
            t.add_row(*cells)
            pairs = [f"{b} {extras[2 * i]} us ({extras[2 * i + 1]})" for i, b in enumerate(self.baselines)]
            line = "   ".join([f"  {escape(r.strategy)}", *pairs, *([f"floor {floor}"] if pct is not None else [])])
            return [t, f"[dim]{line}[/dim]"]
        t.add_row(*cells, *extras, floor, escape(r.strategy))
        return [t]


def summary(records: list[BenchRecord]) -> list[str]:
    """nccl-tests' closing line, and the geometric-mean speed-up per baseline."""
    lines = []
    if not records:
        return lines
    busbw = [r.out_of_place.busbw for r in records]
    wrong = sum(r.out_of_place.nwrong + (r.in_place.nwrong if r.in_place else 0) for r in records)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}")
    # A bare number, as nccl-tests prints it: log readers take the last field.
    lines.append(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):g}")
    for b in sorted({b for r in records for b in r.baselines}):
        ratios = [s for s in (r.speedup(b) for r in records) if s]
        if ratios:
            geo = statistics.geometric_mean(ratios)
            # rows, not sizes: with several collectives or strategies a size has several rows
            lines.append(f"# Speed-up vs {b:<9}: geometric mean {geo:.2f}x over {len(ratios)} rows (min "
                         f"{min(ratios):.2f}x, max {max(ratios):.2f}x)")
    return lines


def json_row(r: BenchRecord) -> dict[str, Any]:
    """nccl-tests -J row shape, plus our fields."""

    def side(s):
        return None if s is None else {"time": s.time_us, "alg_bw": s.algbw, "bus_bw": s.busbw, "nwrong": s.nwrong}

    row = {"collective": r.collective, "size": r.size, "count": r.count, "type": r.type, "redop": r.redop,
           "root": r.root, "out_of_place": side(r.out_of_place), "in_place": side(r.in_place)}
    row.update(strategy=r.strategy, config=r.config, baselines=r.baselines,
               speedup={b: r.speedup(b) for b in r.baselines}, floor_us=r.floor_us, roofline_pct=r.roofline_pct(),
               ranks=r.ranks, layout=r.layout, plan=r.plan)
    if r.counts is not None:  # a variable collective's: how its counts were drawn, and the counts themselves
        row.update(distribution=r.distribution, counts=list(r.counts))
    return row


def write_json(path: str | Path, records: Iterable[BenchRecord], environment: dict[str, Any], command: str,
               complete: bool = True) -> None:
    """``complete`` is false while the run goes on: bench rewrites the file
    after every row, so an interrupted run leaves the rows it measured."""
    data = {"schema": JSON_SCHEMA, "command": command, "complete": complete, "environment": environment,
            "results": [json_row(r) for r in records]}
    write_output(path, json.dumps(_finite(data), indent=1, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity as null: JSON has no such numbers, and a
    file with them is refused by strict readers (purlin plot, jq, JavaScript)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


CSV_FIELDS = ("collective", "size", "count", "type", "redop", "root", "strategy", "oop_time_us", "oop_algbw",
              "oop_busbw", "oop_nwrong", "ip_time_us", "ip_algbw", "ip_busbw", "ip_nwrong", "floor_us", "roofline_pct",
              "ranks", "layout", "plan")


def write_csv(path: str | Path, records: Iterable[BenchRecord], complete: bool = True) -> None:
    """The last column, ``complete``, is 0 in every row while the run goes on
    (a CSV has no header block to say it once), 1 once it has finished."""
    records = list(records)
    baselines = sorted({b for r in records for b in r.baselines})
    out = io.StringIO()
    writer = csv.writer(out)
    header = [*CSV_FIELDS, *(f"{b}_us" for b in baselines), *(f"speedup_{b}" for b in baselines), "complete"]
    writer.writerow(header)
    for r in records:
        ip = r.in_place
        row = [r.collective, r.size, r.count, r.type, r.redop, r.root, r.strategy, r.out_of_place.time_us,
               r.out_of_place.algbw, r.out_of_place.busbw, r.out_of_place.nwrong]
        row += [ip.time_us, ip.algbw, ip.busbw, ip.nwrong] if ip else ["", "", "", ""]
        row += [r.floor_us if r.floor_us is not None else "", r.roofline_pct() if r.roofline_pct() is not None else ""]
        row += [r.ranks, r.layout, r.plan or ""]
        row += [r.baselines.get(b, "") for b in baselines] + [r.speedup(b) or "" for b in baselines] + [int(complete)]
        writer.writerow(row)
    write_output(path, out.getvalue())
