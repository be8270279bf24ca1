"""Issue 29, classes 10 to 15: what a newcomer sees in the first minutes.
Interrupts say so; the Quickstart's bench in a terminal is a clean table
under a transient bar; refusals come before any output; results say what
produced them; tables fit 80 columns and carry their units (CPU, numpy)."""

from __future__ import annotations

import csv
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from purlin_bench.cli.main import run

PURLIN = [sys.executable, "-c", "from purlin_bench.cli.main import run; run()"]
BENCH = ("bench", "all-reduce", "--backend", "numpy")
TUNE = (
    "tune",
    "all-reduce",
    "--backend",
    "numpy",
    "--trials",
    "1",
    "--confirm",
    "0",
    "--dtype",
    "float32",
    "--ranks",
    "2",
)


def purlin(capsys, *args) -> tuple[int, str, str]:
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def in_a_terminal(args: list[str], columns: int = 80) -> str:
    """What ``args`` writes to a terminal of ``columns`` (stdout and stderr both)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, close_fds=True, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(master)
    return b"".join(chunks).decode()


# -- class 10: interrupts say so ----------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "code", "line"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
@pytest.mark.parametrize(
    "command", [(*BENCH, "-b", "1M", "-e", "64M"), ("check", "all", "--backend", "numpy", "--count", "1000000,4000000")]
)
def test_an_interrupt_is_one_line(tmp_path, sig, code, line, command):
    with open(tmp_path / "out", "w") as out:
        # SIGINT as a terminal sends it: a test run started in the background
        # (a shell's `&`) passes SIGINT on ignored, and Python keeps it so.
        proc = subprocess.Popen(
            [*PURLIN, *command],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(8)  # past the imports on a loaded machine: both commands run for minutes
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.splitlines()[-1] == f"purlin: error: {line}", err


def test_a_description_with_terminal_escapes_is_refused(capsys, tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(
        'name: x\ndescription: "hi \\e[2J there"\nop: copy\ncount: buffer\ninput:\n - chunk: c\noutput:\n - chunk: c\n'
    )
    code, out, err = purlin(capsys, "list", "--spec", path)
    assert code == 2 and out == "" and "\x1b" not in err
    assert "unprintable character '\\x1b'" in err


# -- class 11: rows above a transient bar, nothing left over ------------------------------


_BAR_END = re.compile(r"\d+/\d+\x1b\[0m \x1b\[33m\d+:\d\d:\d\d\x1b\[0m")


def test_the_quickstart_bench_in_a_terminal_prints_rows_above_a_transient_bar():
    screen = in_a_terminal([*PURLIN, *BENCH, "-e", "64K", "-f", "4"])
    ends = list(_BAR_END.finditer(screen))
    assert ends, screen[:2000]  # the bar was drawn
    for end in ends:
        after = screen[end.end() : end.end() + 40]
        # Each drawing of the bar is cleared before anything else is written:
        # a row on the bar's line, or a stale bar above the header, fails this.
        assert after.startswith("\r\x1b[2K") or after.startswith("\r\n\x1b[?25h\r\x1b[1A\x1b[2K"), repr(
            screen[end.start() - 200 : end.end() + 80]
        )
    assert "# Out of bounds values : 0 OK" in screen


# -- class 13: everything checked before the first byte ------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(("--plan", "auto"), "no tuned plan"), (("--root", "9"), "out of range")],
    ids=["plan-auto", "root"],
)
def test_bench_refuses_before_any_header(capsys, tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)  # no results-cpu/ here
    command = ("bench", "gather", "--backend", "numpy", "--ranks", "3", "-e", "64", *args)
    code, out, err = purlin(capsys, *command)
    assert code == 2 and out == "", out
    assert len(err.splitlines()) == 1 and fragment in err, err


# -- class 14: results say what produced them ---------------------------------------------------


def test_rows_carry_ranks_layout_root_and_the_plan_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert purlin(capsys, *TUNE, "--max-bytes", "1K")[0] == 0
    code, out, err = purlin(
        capsys,
        *BENCH,
        "--plan",
        "auto",
        "--ranks",
        "2",
        "-e",
        "64",
        "--json",
        "r.json",
        "--csv",
        "r.csv",
        "--format",
        "nccl-tests",
    )
    assert code == 0, err
    plan = "results-cpu/cpu/all-reduce-2vr-float32.json"
    assert f"# plan: all-reduce from {plan}" in out
    data = json.loads(Path("r.json").read_text())
    assert data["environment"]["plans"] == {"all-reduce": plan}
    rows = list(csv.DictReader(open("r.csv")))
    for row in (*data["results"], *rows):
        assert str(row["ranks"]) == "2" and row["layout"] == "2vr" and row["plan"] == plan
        assert str(row["root"]) == "-1"  # nccl-tests' root of a collective without one, in every format
    assert [line.split()[4] for line in out.splitlines() if line and line[0] != "#"] == ["-1"] * len(rows)


def test_a_tune_with_another_sweep_does_not_silently_replace_a_plan(capsys, tmp_path):
    assert purlin(capsys, *TUNE, "--max-bytes", "1K", "--out", tmp_path)[0] == 0
    plan = tmp_path / "cpu" / "all-reduce-2vr-float32.json"
    before = plan.read_text()
    code, out, err = purlin(capsys, *TUNE, "--sweep", "quick", "--max-bytes", "64K", "--out", tmp_path)
    assert code == 2 and "holds a plan from sweep 'default'" in err and "--force" in err
    assert plan.read_text() == before


# -- class 15: 80 columns, units, one number format ----------------------------------------------


def _lines(screen: str) -> list[str]:
    """The screen's lines as last drawn: bar redraws (\\r + clear) dropped, colours stripped."""
    plain = []
    for line in screen.split("\r\n"):
        line = line.split("\x1b[2K")[-1]
        plain.append(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line))
    return plain


def test_the_bench_table_fits_80_columns_with_whole_headers_and_units():
    lines = _lines(in_a_terminal([*PURLIN, *BENCH, "-e", "64K", "-f", "64"], columns=80))
    header = "\n".join(line for line in lines if "busbw" in line or "(GB/s)" in line or "out-of-place" in line)
    assert "…" not in header, header
    assert header.count("algbw") == 2 and header.count("busbw") == 2 and header.count("(GB/s)") == 4, header
    assert "(us)" in header and "out-of-place" in header and "in-place" in header
    table = [line for line in lines if re.match(r"\s+\d+\s+\d+\s", line)]
    assert table and all(len(line) <= 80 for line in table), table


def test_the_tune_summary_never_cuts_the_winner_and_prints_busbw_fixed(tmp_path):
    lines = _lines(in_a_terminal([*PURLIN, *TUNE, "--max-bytes", "1K", "--out", str(tmp_path)], columns=80))
    plan = json.loads((tmp_path / "cpu" / "all-reduce-2vr-float32.json").read_text())
    winner = plan["entries"][0]["config"]["strategy"]
    text = "\n".join(lines)
    assert any(f": {winner}(" in line or line.rstrip().endswith(f": {winner}") for line in lines), text
    assert "…" not in text and "e-0" not in text, text


# -- class 16: the tool matches what the README says ------------------------------------------------


def test_every_command_that_takes_a_collective_takes_spec_and_d(capsys, tmp_path):
    spec = Path(__file__).resolve().parents[2] / "examples" / "ring-shift.yaml"
    code, out, err = purlin(
        capsys, *BENCH[:1], "--spec", spec, "--backend", "numpy", "--ranks", "2", "-e", "64", "-d", "float32"
    )
    assert code == 0 and "ring-shift" in out, err
    code, out, err = purlin(capsys, *TUNE[:1], "--spec", spec, *TUNE[2:], "--max-bytes", "1K", "--out", tmp_path)
    assert code == 0, err
    assert (tmp_path / "cpu" / "ring-shift-2vr-float32.json").exists()


def test_help_lists_the_values_of_datapath_parameters(capsys):
    assert run(["bench", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "sm | ce" in out and "128 | 256 | 512" in out


def test_one_rank_is_said_in_the_singular(capsys):
    code, out, err = purlin(capsys, *BENCH, "--ranks", "1", "-e", "64", "--format", "nccl-tests")
    assert code == 0, err
    assert "(1 rank, float32" in out and "1 ranks" not in out.replace("simulated ranks", "")


def test_the_reference_baseline_is_explained_where_it_is_printed(capsys, tmp_path):
    code, out, err = purlin(capsys, *BENCH, "-e", "64", "--format", "nccl-tests")
    assert code == 0 and "numpy" in out
    assert "# baseline numpy: the expected outputs computed directly with NumPy" in out
    code, out, err = purlin(capsys, *TUNE, "--max-bytes", "1K", "--out", tmp_path)
    assert code == 0 and "baseline numpy: the expected outputs computed directly with NumPy" in out


# -- class 12: never a package name this project does not own on PyPI --------------------------------

_FOREIGN_OWNERS = {"backends/cupy/runtime/device.py", "torch/__init__.py"}  # not this change's files: see issue 29


def _hints(paths) -> list[str]:
    return [
        f"{p}:{n}"
        for p in paths
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "install 'purlin-bench[" in line or 'install "purlin-bench[' in line
    ]


def test_install_hints_name_the_checkout_not_a_package_index_name():
    package = Path(__file__).resolve().parents[2] / "purlin_bench"
    mine = [p for p in package.rglob("*.py") if str(p.relative_to(package)) not in _FOREIGN_OWNERS]
    assert not _hints(mine)


def test_install_hints_in_the_backend_and_torch_modules():
    package = Path(__file__).resolve().parents[2] / "purlin_bench"
    assert not _hints([package / p for p in _FOREIGN_OWNERS])
