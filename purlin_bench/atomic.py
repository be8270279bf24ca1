"""Atomic file writes: a reader of the path sees the old file or the new one,
never half of one, and a failed write leaves no temp file behind.

Every file purlin writes for others to read (plan artifacts, exports, bench
results) goes through :func:`write_text_atomic`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from purlin_bench.errors import PurlinError

# mkstemp creates 0600; results are shared (other users, CI artifacts, a
# web server), so they get the mode an ordinary `open(..., "w")` would.
MODE = 0o644


class WriteError(PurlinError):
    """A file could not be written (no space, no permission, no folder)."""


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``: a temp file in the same folder (so
    the rename stays on one file system), flushed to disk, then renamed over
    the target. Any failure is one :class:`WriteError` line naming the path
    and the system's reason."""
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, MODE)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str | None) -> None:
    if tmp is None:
        return
    try:
        os.unlink(tmp)
    except OSError:
        pass  # already gone, or the folder vanished: nothing is left to clean


__all__ = ["MODE", "WriteError", "write_text_atomic"]
