"""What the bad-input tests share: a command run in process, and the check
that it was refused in one line, before any output, within seconds."""

from __future__ import annotations

import time

from purlin_bench.cli.main import run


def purlin(capsys, *args) -> tuple[int, str, str]:
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, fragment: str, *args, seconds: float = 20) -> str:
    """The one error line of a refused command: non-zero, on stderr,
    nothing on stdout (refused before any header or table), ``fragment`` in it."""
    start = time.perf_counter()
    code, out, err = purlin(capsys, *args)
    assert code != 0, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("purlin: error: "), err
    assert fragment in lines[0], lines[0]
    assert out == "", out
    assert time.perf_counter() - start < seconds
    return lines[0]
