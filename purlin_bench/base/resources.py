"""Where the package's data folders are: inside an installed wheel, or beside
the package in a source checkout (an editable install points at the checkout)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # purlin_bench/, above base/


def data_dir(name: str) -> Path:
    """The folder ``name`` (collectives, atoms, sweeps) shipped with purlin-bench."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"purlin-bench data folder '{name}' is missing from this install")
