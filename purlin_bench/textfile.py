"""Read a text file a user named: any failure is one line naming the file.

Decoded here, not by ``read_text()``: a binary file given by mistake (a
PNG, a plan database) is the user's input, so it is one line saying what
the file was expected to be, never a UnicodeDecodeError traceback."""

from __future__ import annotations

from pathlib import Path


def read_text(path: str | Path, error: type[Exception], expected: str) -> str:
    """The UTF-8 text of ``path``; ``error`` (the caller's error class) says
    ``PATH: cannot read: WHY`` or ``PATH: EXPECTED: not UTF-8 text (byte N)``."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {expected}: not UTF-8 text (byte {exc.start})") from None
