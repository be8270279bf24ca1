"""nccl-tests' text layout, for logs that nccl-tests readers parse.

Cluster acceptance suites and dashboards read nccl-tests logs as text: lines
starting with ``#`` are comments, the header line holds ``size count type
redop root time algbw busbw #wrong`` (out of place, then in place), a data row
is whitespace-separated fields starting with the size in bytes, and readers
index its columns from the end (busbw in place is field -2, out of place -6).
So every data row has exactly nccl-tests' 13 fields, and what purlin adds
(strategy, baselines, floor) goes on a ``#`` line under the row. The format
strings are nccl-tests' own (src/common.cu).
"""

from __future__ import annotations

from purlin_bench.tools.bench.measure import BenchRecord, Side

# nccl-tests' type names (ncclFloat prints "float", ncclHalf "half").
_TYPE = {"float32": "float", "float16": "half", "float64": "double", "bfloat16": "bfloat16", "int32": "int32"}
# nccl-tests' token where a value was not measured (its #wrong without -c).
NA = "N/A"


def header(title: str) -> list[str]:
    return [
        "#",
        f"# {title}",
        "#",
        "#                                                              out-of-place                       in-place"
        "          ",
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


def _time(us: float) -> str:
    # nccl-tests keeps the column 7 wide: fewer decimals as times grow.
    return "%7.0f" % us if us >= 10000 else "%7.1f" % us if us >= 100 else "%7.2f" % us


def _side(side: Side | None, checked: bool) -> str:
    if side is None:  # no in-place form (or --no-inplace): the four fields stay, so indexing from the end holds
        return "  %7s  %6s  %6s  %5s" % (NA, NA, NA, NA)
    wrong = "%5d" % side.nwrong if checked else "%5s" % NA
    return "  %7s  %6.2f  %6.2f  %5s" % (_time(side.time_us), side.algbw, side.busbw, wrong)


def row(r: BenchRecord, rooted: bool, checked: bool) -> str:
    """One data row; nccl-tests prints root -1 for a collective without one
    (the record holds -1 then already: every format says the same)."""
    line = "%12d  %12d  %8s  %6s  %6d" % (r.size, r.count, _TYPE.get(r.type, r.type), r.redop, r.root if rooted else -1)
    return line + _side(r.out_of_place, checked) + _side(r.in_place, checked)


def extras(r: BenchRecord, baselines: tuple[str, ...]) -> str:
    """purlin's columns for the row above, on a comment line."""
    parts = [f"strategy {r.strategy}"]
    for b in baselines:
        us, speed = r.baselines.get(b), r.speedup(b)
        parts.append(f"{b} " + ("-" if us is None else f"{us:.2f} us") + ("" if speed is None else f" ({speed:.2f}x)"))
    pct = r.roofline_pct()
    if pct is not None:
        parts.append(f"floor {pct:.0f}%")
    return "#   " + "; ".join(parts)
