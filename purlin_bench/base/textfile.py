"""Files a user named, read and written the one way: any failure is one line
naming the file.

Reading: only a regular file, only up to a size cap, then decoded here (not
by ``read_text()``). A FIFO would block the open forever, /dev/zero or a
symlink to it would be read until memory runs out, and a binary file given
by mistake (a PNG, a plan database) would be a UnicodeDecodeError traceback.

Writing (every output: --json, --csv, --plot, export --output, plot
--output, plan files): a regular file, or a path not there yet, is written
to a temp file beside it and renamed over it, so a reader sees the old file
or the new one. A character device or a FIFO (``/dev/null``, ``/dev/stdout``,
a pipe a reader waits on) is opened and streamed into: renaming over it
would replace the device node itself (as root, the machine's /dev/null).
Anything else (a folder, a socket) is refused.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

import numpy as np

from purlin_bench.base.atomic import MODE, WriteError

# Every file purlin reads is small (a spec or sweep of a few kB, a plan, a bench
# result of a few thousand rows): 16 MiB is far above any of them. It bounds the
# read, not the parse: YAML is bounded while it is composed (yamlfile: refused at
# its node bound in under a second), JSON near the cap parses in about 2 s (parse_json
# scans the text in C and walks values in Python only where the scan finds a suspect).
MAX_TEXT_BYTES = 16 << 20
# Plain numbers in a spec, plan or result fit in 64 bits (20 digits); a longer
# one is refused before Python converts it (conversion is quadratic in its digits).
MAX_DIGITS = 40
# JSON a purlin tool wrote is a few levels deep; deeper is not ours (and
# Python's parser would raise RecursionError near 1,000 levels).
MAX_JSON_DEPTH = 64


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | Path, error: type[Exception], limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes."""
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once instead
        # of waiting forever; the fstat below then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: cannot read: {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise error(f"{path}: cannot read: {info.st_size} bytes, more than the {limit >> 20} MiB a purlin input "
                        f"may be")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as handle:
            raw = handle.read(limit + 1)  # a file growing while read is still capped
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise error(f"{path}: cannot read: more than the {limit >> 20} MiB a purlin input may be")
    return raw


def read_text(path: str | Path, error: type[Exception], expected: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of ``path``; ``error`` (the caller's error class) says
    ``PATH: cannot read: WHY`` or ``PATH: EXPECTED: not UTF-8 text (byte N)``."""
    raw = read_bytes(path, error, limit)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {expected}: not UTF-8 text (byte {exc.start})") from None
    return text


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"a number of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def parse_json(text: str, where: str, error: type[Exception], constants: bool = True) -> Any:
    """JSON with its numbers and nesting bounded; any failure is one line.
    ``constants=False`` refuses NaN and Infinity (which Python's parser takes)
    for a reader that does not name the non-finite field itself."""
    # The checks below scan the text in C first and call Python per value only where the scan
    # finds what they look for: per value, a 16 MiB plan took 5 s to parse (json.loads: 0.3 s).
    hooks: dict[str, Callable] = {} if constants else {"parse_constant": _no_constant}
    if _LONG_DIGITS.search(text):  # maybe inside a string: then _bounded_int never sees it
        hooks["parse_int"] = _bounded_int
    try:
        data = json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    except ValueError as exc:  # from _bounded_int / _no_constant
        raise error(f"{where}: not valid JSON: {exc}") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deeply") from None
    if _nesting(text) > MAX_JSON_DEPTH:
        raise error(f"{where}: not valid JSON: nested more than {MAX_JSON_DEPTH} levels deep")
    bad = _lone_surrogate(data) if _SURROGATE_ESCAPE.search(text) else None
    if bad is not None:
        # JSON's \ud800 escape decodes to a str that no file or terminal can
        # take: every later print or write of it would be a traceback.
        raise error(f"{where}: not valid JSON: a lone surrogate ({bad!r}) in a string")
    return data


_LONG_DIGITS = re.compile(r"\d{%d}" % (MAX_DIGITS + 1))
# A str from UTF-8 holds no surrogate; only a \uD800-\uDFFF escape in the JSON makes one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: a run of plain characters per step


def _nesting(text: str) -> int:
    """How deeply valid JSON ``text`` nests lists and objects: the running sum of its
    brackets outside strings, at C speed (numpy) where a walk of the parsed values is
    Python per value."""
    codes = np.frombuffer(_STRING.sub("", text).encode("utf-8"), np.uint8)
    steps = ((codes == ord("[")) | (codes == ord("{"))).astype(np.int32)
    steps -= (codes == ord("]")) | (codes == ord("}"))
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def _lone_surrogate(data: Any) -> str | None:
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as exc:
                return node[exc.start:exc.end]
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


# -- writing -------------------------------------------------------------------


def is_stream(path: str | Path) -> bool:
    """True when ``path`` is a character device or a FIFO, or an existing
    name under /dev or /proc (``/dev/stdout`` redirected to a file): written
    once as a stream, appended to, never replaced (renaming over
    /dev/stdout would swap the shell's file for ours, and as root leave a
    regular file in /dev). Never rewritten in place either: a bench rewrites
    its regular-file results after every row, a pipe's reader would get
    them N times."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    return stat.S_ISREG(mode) and os.path.abspath(path).startswith(("/dev/", "/proc/"))


def output_refusal(path: str | Path) -> str | None:
    """Why ``path`` cannot be an output (a folder, a socket), or None: a
    regular file, a missing path, a character device or a FIFO are fine."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing (or a dangling link): the writer creates it
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return None
    return f"is {_kind(mode)}, not a file"


def writable_refusal(path: str | Path) -> str | None:
    """Why ``path`` cannot be written as :func:`write_with` would write it
    (missing folders created), or None. For checks before work: a tune that
    measures for an hour and then finds its plan's path is a folder has
    wasted the hour."""
    path = Path(path)
    why = output_refusal(path)
    if why:
        return why
    for part in path.parts:
        if len(os.fsencode(part)) > 255:
            return f"a name of {len(os.fsencode(part))} bytes in the path (at most 255)"
    if is_stream(path):
        return None if os.access(path, os.W_OK) else "permission denied"
    existing = path.parent
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not os.path.isdir(existing):
        return f"{existing} is not a folder"
    try:
        fd, name = tempfile.mkstemp(prefix=".purlin-probe.", dir=existing)
    except OSError as exc:
        return f"cannot write in {existing}: {exc.strerror or exc}"
    os.close(fd)
    _remove(name)
    return None


def write_output(path: str | Path, data: str | bytes, make_folder: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` the one way (module doc);
    ``make_folder`` creates its missing folders (a plan folder)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    write_with(path, lambda handle: handle.write(payload), make_folder)


def write_with(path: str | Path, fill: Callable[[IO[bytes]], Any], make_folder: bool = False) -> None:
    """Call ``fill`` with a binary handle whose bytes end up at ``path``:
    streamed into a device or FIFO, else via a temp file and a rename.
    Any failure is one :class:`WriteError` line naming the path."""
    path = Path(path)
    if make_folder:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    why = output_refusal(path)
    if why:
        raise WriteError(f"{path}: cannot write: {why}")
    if is_stream(path):
        _stream(path, fill)
        return
    # A symlink to a regular file: the file it names is replaced, not the link.
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".purlin.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, MODE)
        # Checked again just before the rename: the path may have become a
        # device or a folder while the data was being produced.
        if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
            raise WriteError(f"{path}: cannot write: it is no longer a regular file")
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _stream(path: Path, fill: Callable[[IO[bytes]], Any]) -> None:
    try:
        # O_NONBLOCK for the open only: a FIFO nobody reads is an error now
        # (ENXIO), not a wait forever.
        # O_APPEND: /dev/stdout may be the shell's file, which holds output already.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = "a FIFO nobody reads" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
        raise WriteError(f"{path}: cannot write: {why}") from None
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            fill(handle)
    except OSError as exc:
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def _remove(tmp: str | None) -> None:
    if tmp is None:
        return
    try:
        os.unlink(tmp)
    except OSError:
        pass  # already gone, or the folder vanished: nothing is left to clean


__all__ = ["MAX_TEXT_BYTES", "is_stream", "output_refusal", "parse_json", "read_bytes", "read_text",
           "writable_refusal", "write_output", "write_with"]
