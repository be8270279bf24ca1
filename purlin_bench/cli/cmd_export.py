"""`purlin export`: a plan artifact in a format another tool reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from purlin_bench.base.textfile import write_output
from purlin_bench.cli.outputs import check_not_inputs, check_output
from purlin_bench.tools.export import formats, render, require_format
from purlin_bench.plans import load_plan_file

ORDER = 60


def export(
    plan: Path = typer.Argument(
        ..., help="a plan artifact (results/<gpu-type>/<collective>-<layout>-<dtype>[-<counts>].json)"
    ),
    fmt: str = typer.Option(..., "--format", help=" | ".join(formats())),
    # A str, not a Path: typer's Path reads --output '' as '.', which hid the empty path.
    output: Optional[str] = typer.Option(None, "--output", help="write here (atomically) instead of to stdout"),
    spec: Optional[Path] = typer.Option(None, "--spec",
                                        help="the collective's spec .yaml, for a plan of your own collective"),
) -> None:
    """Export a tuned plan: json (docs/plan.schema.json), csv, or a C/C++ header."""
    require_format(fmt)
    check_output(output, "--output")
    check_not_inputs([("--output", output)], [("PLAN", plan), ("--spec", spec)])
    collective = None
    if spec is not None:
        from purlin_bench.spec.loader import load_spec_file

        collective = load_spec_file(spec)
    # The same loader as purlin_bench.load_plan: both accept exactly the same files.
    artifact = load_plan_file(plan, collective)
    text = render(artifact, fmt, str(plan))
    if output is None:
        sys.stdout.write(text)
        return
    write_output(output, text)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
