"""`purlin plot RESULTS.json --output FILE.png`."""

from __future__ import annotations

import typer

from purlin_bench.tools.bench.plot import load_rows, plot_rows
from purlin_bench.cli.outputs import check_plot

ORDER = 45


def plot(
    results: str = typer.Argument(..., help="a file written by `purlin bench --json`"),
    output: str = typer.Option(..., "--output",
                               help="the image to write (PNG, or another format matplotlib writes, by extension)"),
    title: str = typer.Option("", "--title", help="figure title [default: the results file]"),
) -> None:
    """Plot bus bandwidth and latency against size, one line per strategy and baseline."""
    check_plot(output, "--output")
    plot_rows(load_rows(results), output, title or results)
    print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
