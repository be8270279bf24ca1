"""Output paths checked before any work: a bench or tune that measures for
minutes and then cannot write its result has wasted those minutes, so every
command calls these on its output options first, one line each.

Each check is one PurlinError line naming the option, the path and why.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from purlin_bench.errors import PurlinError


def check_output(path: str | Path | None, option: str) -> None:
    """``path`` can be written as a file: not an existing folder, in a folder
    that exists and takes new files. ``None`` (the option not given) passes."""
    if path is None:
        return
    path = Path(path)
    if str(path) == "":
        raise PurlinError(f"{option}: empty path")
    if path.is_dir():
        raise PurlinError(f"{option} {path}: is a folder, not a file")
    parent = path.parent
    if not parent.exists():
        # Not created for the user: a typo in a folder name would otherwise
        # scatter results into a new tree nobody looks at.
        raise PurlinError(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise PurlinError(f"{option} {path}: {parent} is not a folder")
    _probe(parent, f"{option} {path}")


def check_output_dir(path: str | Path | None, option: str) -> None:
    """``path`` is a folder purlin may fill (created if missing, as a plan
    folder is): not a file, and the nearest folder that exists takes files."""
    if path is None:
        return
    path = Path(path)
    if str(path) == "":
        raise PurlinError(f"{option}: empty path")
    if path.exists() and not path.is_dir():
        raise PurlinError(f"{option} {path}: is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PurlinError(f"{option} {path}: {existing} is not a folder")
    _probe(existing, f"{option} {path}")


def check_plot(path: str | Path | None, option: str) -> None:
    """A plot path: writable (check_output) and with an extension matplotlib
    writes, since it picks the format from the extension."""
    if path is None:
        return
    check_output(path, option)
    suffix = Path(path).suffix.lower().removeprefix(".")
    known = plot_formats()
    if suffix not in known:
        got = f"'.{suffix}'" if suffix else "no extension"
        raise PurlinError(f"{option} {path}: {got} is not an image format matplotlib writes (known: {', '.join(known)})")


def plot_formats() -> tuple[str, ...]:
    """The extensions matplotlib's non-interactive canvas saves, asked of
    matplotlib (imported only when a plot is asked for: it costs ~0.3 s)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return tuple(sorted(FigureCanvasAgg.get_supported_filetypes()))


def check_distinct(*outputs: tuple[str, str | Path | None]) -> None:
    """No two output options (``(option, path)`` pairs) name the same file:
    the later write would silently replace the earlier one."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise PurlinError(f"{seen[key]} and {option} both name {path}: one would overwrite the other")
        seen[key] = option


def _probe(folder: Path, what: str) -> None:
    """Create and remove a temp file in ``folder``: the only test that also
    holds for root, read-only mounts and pseudo file systems such as /proc
    (os.access says yes to root everywhere)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".purlin-probe.", dir=folder)
    except OSError as exc:
        raise PurlinError(f"{what}: cannot write in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass  # removed by someone else already: nothing is left behind


__all__ = ["check_distinct", "check_output", "check_output_dir", "check_plot", "plot_formats"]
