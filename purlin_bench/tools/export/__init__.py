"""`purlin export`: plan files in formats other tools read, one module per format.

Behind a small registry, each module has ``render(plan, source) -> str``
and raises :class:`ExportError` (one line) when its format cannot express
the plan."""

from __future__ import annotations

from importlib import import_module

from purlin_bench.base.errors import PurlinError
from purlin_bench.plans import PlanArtifact

# format -> module; imported when asked for.
_FORMATS = {
    "json": "purlin_bench.tools.export.json_format",
    "csv": "purlin_bench.tools.export.csv_format",
    "header": "purlin_bench.tools.export.header",
}


class ExportError(PurlinError):
    """A plan cannot be written in the asked format."""


def formats() -> list[str]:
    return list(_FORMATS)


def require_format(fmt: str) -> None:
    if fmt not in _FORMATS:
        raise ExportError(f"unknown export format '{fmt}' (known: {', '.join(_FORMATS)})")


def render(plan: PlanArtifact, fmt: str, source: str) -> str:
    """The text of ``plan`` (read from ``source``) in format ``fmt``."""
    require_format(fmt)
    return import_module(_FORMATS[fmt]).render(plan, source)


__all__ = ["ExportError", "formats", "render", "require_format"]
