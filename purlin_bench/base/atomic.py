"""Atomic file writes: a reader of the path sees the old file or the new one,
never half of one, and a failed write leaves no temp file behind.

Every file purlin writes for others to read (plan artifacts, exports, bench
results) goes through textfile.write_output; :func:`write_text_atomic` is
that writer under the name callers of the first version know.
"""

from __future__ import annotations

from pathlib import Path

from purlin_bench.base.errors import PurlinError

# mkstemp creates 0600; results are shared (other users, CI artifacts, a
# web server), so they get the mode an ordinary `open(..., "w")` would.
MODE = 0o644


class WriteError(PurlinError):
    """A file could not be written (no space, no permission, no folder)."""


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as every output is written
    (textfile.write_output): a regular file by a temp file in the same folder,
    flushed and renamed over it; a device or FIFO as a stream, never renamed
    over. Any failure is one :class:`WriteError` line naming the path."""
    from purlin_bench.base.textfile import write_output

    write_output(path, text, make_folder=True)


__all__ = ["MODE", "WriteError", "write_text_atomic"]
