"""Read a YAML file the project's way: any failure is one line naming the
file (and the line and column of a syntax error), raised as the caller's
error class so each layer keeps its own error type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    # Decoded here, not by read_text(): a binary file (a PNG, a plan database
    # passed by mistake) is the user's input, so it is one line, not a traceback.
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not a YAML file: not UTF-8 text (byte {exc.start})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{path}: malformed YAML{at}: {problem}") from None
