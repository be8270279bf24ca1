"""Golden outputs: what `purlin show` prints for one small all-reduce under
every strategy (the program, and the device code the compiled datapath
generates for it), and what `purlin check all --backend numpy` finds. A
redesign that moves code keeps these byte for byte; a change meant to alter
them rewrites them on purpose:

    PURLIN_UPDATE_GOLDEN=1 python3 -m pytest -q tests/tools/test_golden.py

and the diff of tests/tools/golden/ is reviewed with the change. No GPU needed
(`--source` only generates text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("PURLIN_UPDATE_GOLDEN") == "1"
STRATEGIES = ("direct", "push", "two-shot", "ring")
SHOW = ("all-reduce", "--ranks", "4", "--count", "64")


def purlin(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "purlin_bench", *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"{path} was missing and is now written: review and commit it")
        return
    want = path.read_text()
    assert text == want, (
        f"{name} differs from tests/tools/golden/{name} (PURLIN_UPDATE_GOLDEN=1 rewrites it if the change is meant)"
    )


def generated_part(source: str) -> str:
    """The build options line and the generated kernel, without the
    interpreter's copy, reduce, flag and watchdog code it includes (that
    code is atoms/snac.cu's, the same for every program)."""
    lines = source.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "purlin_compiled(" in line)
    while start > 0 and lines[start - 1].startswith("//"):
        start -= 1
    return lines[0] + "...\n" + "".join(lines[start:])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_show_prints_the_same_program(strategy):
    compare(f"show-all-reduce-{strategy}.txt", purlin("show", *SHOW, "--strategy", strategy))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_show_source_generates_the_same_kernel(strategy):
    compare(
        f"show-source-all-reduce-{strategy}.txt",
        generated_part(purlin("show", *SHOW, "--strategy", strategy, "--source")),
    )


def test_check_all_on_numpy_finds_the_same():
    """Every row's identity, status, steps and #wrong, and the summary's
    counts (times left out: they are the machine's)."""
    data = json.loads(purlin("check", "all", "--backend", "numpy", "--json"))
    fields = (
        "collective",
        "ranks",
        "root",
        "count",
        "dtype",
        "redop",
        "strategy",
        "inplace",
        "status",
        "steps",
        "wrong",
    )
    rows = [" ".join(str(r[f]) for f in fields) for r in data["results"]]
    summary = {k: v for k, v in data["summary"].items() if k != "seconds"}
    compare(
        "check-all-numpy.txt",
        " ".join(fields) + "\n" + "\n".join(rows) + "\n" + json.dumps(summary, sort_keys=True) + "\n",
    )
