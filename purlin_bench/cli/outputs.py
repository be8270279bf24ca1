"""Output paths checked before any work: a bench or tune that measures for
minutes and then cannot write its result has wasted those minutes, so every
command calls these on its output options first, one line each.

Each check is one PurlinError line naming the option, the path and why.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from purlin_bench.base.errors import PurlinError
from purlin_bench.base.textfile import is_stream, output_refusal


def check_output(path: str | Path | None, option: str) -> None:
    """``path`` can be written as a file: not an existing folder, in a folder
    that exists and takes new files. ``None`` (the option not given) passes."""
    if path is None:
        return
    if str(path) == "":  # before Path(), which reads '' as '.'
        raise PurlinError(f"{option}: empty path")
    path = Path(path)
    _check_name(path, option)
    if path.is_dir():
        raise PurlinError(f"{option} {path}: is a folder, not a file")
    why = output_refusal(path)
    if why:
        raise PurlinError(f"{option} {path}: {why}")
    if is_stream(path):
        # A device or FIFO is streamed into (textfile.write_with), never
        # replaced: only whether it opens for writing matters, not its folder.
        if not os.access(path, os.W_OK):
            raise PurlinError(f"{option} {path}: cannot write: permission denied")
        return
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
    if str(path) == "":  # before Path(), which reads '' as '.'
        raise PurlinError(f"{option}: empty path")
    path = Path(path)
    _check_name(path, option)
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
        raise PurlinError(f"{option} {path}: {got} is not an image format matplotlib writes (known: "
                          f"{', '.join(known)})")


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
        if is_stream(path):
            continue  # /dev/null twice: streams, nothing is overwritten
        if key in seen:
            raise PurlinError(f"{seen[key]} and {option} both name {path}: one would overwrite the other")
        seen[key] = option


def check_not_inputs(outputs, inputs) -> None:
    """No output option (``(option, path)`` pairs) names a file the command
    reads (``inputs``, the same pairs): written over, a user's spec or tuned
    plan would be lost to the results, however the path was spelled (a
    relative path, a symbolic or hard link: os.path.samefile)."""
    read = [(option, path) for option, path in inputs if path is not None and os.path.exists(path)]
    for option, path in outputs:
        if path is None or is_stream(path) or not os.path.exists(path):
            continue  # a new file is no input; a stream is written into, not replaced
        for source, where in read:
            if os.path.samefile(path, where):
                raise PurlinError(f"{option} {path}: is the {source} this command reads; write the results elsewhere")


def _check_name(path: Path, option: str) -> None:
    """Every component within the file system's name limit: a longer one
    fails every call on the path (ENAMETOOLONG), so it is said here, once."""
    try:
        limit = os.pathconf(_existing(path), "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise PurlinError(f"{option}: a name of {len(os.fsencode(part))} bytes in the path (at most {limit})")


def _existing(path: Path) -> Path:
    """The nearest folder of ``path`` that exists (for its file system's limits)."""
    here = path.parent
    while not os.path.isdir(here) and here != here.parent:  # isdir: False on any OSError
        here = here.parent
    return here if os.path.isdir(here) else Path(".")


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


__all__ = ["check_distinct", "check_not_inputs", "check_output", "check_output_dir", "check_plot", "plot_formats"]
