"""Read a YAML file the project's way: any failure is one line naming the
file (and the line and column of a syntax error), raised as the caller's
error class so each layer keeps its own error type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from purlin_bench.textfile import read_text


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    path = Path(path)
    text = read_text(path, error, "not a YAML file")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}: malformed YAML{at}: {problem}") from None
