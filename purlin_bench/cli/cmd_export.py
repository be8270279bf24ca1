"""`purlin export`: a plan artifact in a format another tool reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from purlin_bench.atomic import write_text_atomic
from purlin_bench.export import formats, render, require_format
from purlin_bench.tune.artifact import load_plan_file

ORDER = 60


def export(
    plan: Path = typer.Argument(..., help="a plan artifact (results/<gpu-type>/<collective>-<layout>-<dtype>.json)"),
    fmt: str = typer.Option(..., "--format", "-f", help=" | ".join(formats())),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write here (atomically) instead of to stdout"),
) -> None:
    """Export a tuned plan: json (docs/plan.schema.json), csv, or a C/C++ header."""
    require_format(fmt)
    artifact = load_plan_file(plan)
    text = render(artifact, fmt, str(plan))
    if output is None:
        sys.stdout.write(text)
        return
    write_text_atomic(output, text)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
