"""The ``purlin`` command line: happy paths, and one clear line for every bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from purlin_bench.cli.main import run
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Program
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.loader import builtin_spec_paths
from purlin_bench.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
RING_SHIFT = str(ROOT / "examples" / "ring-shift.yaml")
PURLIN = Path(sys.executable).with_name("purlin")


def purlin(capsys, *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, fragment: str) -> None:
    assert code != 0
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("purlin: error: "), err
    assert fragment in lines[0], err
    assert "Traceback" not in out + err


@pytest.fixture
def bad_yaml(tmp_path) -> str:
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nop: [copy\ninput: c\n")
    return str(path)


@pytest.fixture
def bad_template(tmp_path) -> str:
    path = tmp_path / "template.yaml"
    path.write_text("name: template\nop: copy\ninput:\n  - chunk: c(r.__class__)\noutput:\n  - chunk: c(r)\n")
    return str(path)


BAD_INPUTS = [
    (["check", "--spec", "{bad_yaml}"], "broken.yaml: malformed YAML at line 3, column 6"),
    (["show", "--spec", "{bad_yaml}", "--ranks", "2"], "malformed YAML"),
    (["list", "--spec", "{bad_yaml}"], "malformed YAML"),
    (["check", "{bad_yaml}"], "broken.yaml: malformed YAML"),
    (["check", "{bad_template}"], "input[0].chunk: 'r.__class__' is not allowed"),
    (["show", "{bad_template}"], "template.yaml: input[0].chunk"),
    (["check", "all-mix"], "unknown collective 'all-mix'"),
    (["show", "all-mix", "--ranks", "4"], "unknown collective 'all-mix'"),
    (["check", "--spec", "/no/such/spec.yaml"], "cannot read"),
    (["check", "all", "--ranks", "0"], "--ranks must be >= 1, got 0"),
    (["check", "all", "--ranks", "2,x"], "--ranks must be whole numbers"),
    (["show", "all-reduce", "--ranks", "0"], "--ranks must be >= 1"),
    (["show", "all-reduce", "--ranks", "-3"], "--ranks must be >= 1"),
    (["check", "all", "--strategy", "tree"], "unknown strategy 'tree'"),
    (["show", "all-reduce", "--strategy", "tree"], "unknown strategy 'tree'"),
    (["check", "all", "--count", "-5"], "--count must be >= 0, got -5"),
    (["show", "all-reduce", "--count", "-5"], "--count must be >= 0"),
    (["check", "all", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["show", "all-reduce", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["check", "all", "--backend", "tpu"], "unknown backend 'tpu'"),
    (
        ["check", "all", "--backend", "numpy", "--kernel", "compiled"],
        "--kernel is a datapath parameter of cupy, not of backend numpy",
    ),
    (["check", "all", "--op", "avg"], "unknown op 'avg'"),
    (["check", "all", "--root", "x"], "--root must be whole numbers"),
    (["check", "all", "--inplace=maybe"], "--inplace takes no value or one of both, yes, no"),
    (["check", "all", "--frobnicate"], "No such option: --frobnicate"),
    (["show", "all-reduce", "--frobnicate"], "No such option"),
    (["list", "--frobnicate"], "No such option"),
    (["frobnicate"], "No such command"),
    (["check"], "missing COLLECTIVE"),
    (["show"], "missing COLLECTIVE"),
    (["show", "all"], "one collective, not 'all'"),
    (["show", "all-reduce", "--spec", RING_SHIFT], "give COLLECTIVE or --spec, not both"),
    (["show", "all-to-all", "--inplace"], "all-to-all cannot run in place"),
    (["show", "reduce", "--ranks", "4", "--root", "4"], "root 4 is out of range for 4 ranks"),
    (["show", "all-reduce", "--slice-bytes", "12Q"], "--slice-bytes: expected a size like"),
    (["show", "all-reduce", "--slice-bytes", "2000000T"], "--slice-bytes: '2000000T' is above the largest size"),
    (["show", "all-reduce", "--channels", "0"], "--channels must be >= 1"),
    (
        ["check", "reduce", "--ranks", "2", "--root", "5"],
        "nothing to check: every combination asked for is n/a (root 5 is not a rank of 2)",
    ),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_nonzero(capsys, bad_yaml, bad_template, args, fragment):
    args = [a.format(bad_yaml=bad_yaml, bad_template=bad_template) for a in args]
    assert_one_line_error(*purlin(capsys, *args), fragment)


def test_check_takes_the_kernel_its_backend_offers_and_refuses_others():
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.cli.cmd_check import _datapath
    from purlin_bench.base.errors import PurlinError

    assert _datapath(CupyBackend, {"kernel": "compiled"}) == {"kernel": "compiled"}
    assert _datapath(CupyBackend, {"kernel": None}) == {}
    with pytest.raises(PurlinError, match="--kernel must be one of interpreted, compiled, got 'jit'"):
        _datapath(CupyBackend, {"kernel": "jit"})


def test_backend_cupy_without_gpu_is_one_line(capsys, monkeypatch):
    from purlin_bench.backends.cupy import CupyBackend

    monkeypatch.setattr(CupyBackend, "available", classmethod(lambda cls: "no CUDA GPU found"))
    assert_one_line_error(
        *purlin(capsys, "check", "all-reduce", "--backend", "cupy"), "backend cupy cannot run here: no CUDA GPU found"
    )


def test_backend_auto_falls_back_to_numpy_with_one_note(capsys, monkeypatch):
    from purlin_bench.backends.cupy import CupyBackend

    monkeypatch.setattr(
        CupyBackend,
        "available",
        classmethod(lambda cls: "CuPy is not installed (pip install 'purlin-bench[cuda13]') and a long reason"),
    )
    code, out, err = purlin(capsys, "check", "reduce", "--ranks", "2", "--backend", "auto")
    assert code == 0
    assert err.splitlines() == [
        "note: no GPU (CuPy is not installed (pip install 'purlin-bench[cuda13]')"
        " and a long reason): using the numpy CPU reference"
    ]
    assert "on numpy" in out


# -- happy paths ----------------------------------------------------------------


def test_version_and_help(capsys):
    code, out, _ = purlin(capsys, "--version")
    assert code == 0 and out.startswith("purlin-bench ")
    for command in ("list", "show", "check"):
        code, out, _ = purlin(capsys, command, "--help")
        assert code == 0 and "Usage: purlin " + command in out


def test_list_shows_every_builtin_and_strategies(capsys):
    code, out, err = purlin(capsys, "list")
    assert code == 0 and not err
    for name in builtin_spec_paths():
        assert name in out
    for name in ("all-gather", "all-reduce"):
        row = next(line for line in out.splitlines() if name in line)
        assert "direct, push, push-parity, two-shot, ring" in row


def test_list_json(capsys):
    code, out, _ = purlin(capsys, "list", "--json")
    assert code == 0
    entries = {e["name"]: e for e in json.loads(out)}
    assert set(entries) == set(builtin_spec_paths())
    assert entries["all-reduce"]["op"] == "reduce" and entries["all-reduce"]["reduce"] == "sum"
    assert entries["all-reduce"]["count"] == "buffer" and entries["all-gather"]["count"] == "chunk"
    assert entries["scatter"]["rooted"] and not entries["all-to-all"]["rooted"]
    assert entries["all-reduce"]["strategies"] == ["direct", "push", "push-parity", "two-shot", "ring"]
    assert entries["broadcast"]["strategies"] == ["direct", "push", "push-parity", "two-shot", "ring"]
    assert "not_applicable" not in entries["broadcast"]  # strategies no longer refuse dataflows
    assert entries["all-gather"]["bench"] == {"size": "count * R", "busbw": "(R - 1) / R"}


def test_show_is_readable(capsys):
    code, out, err = purlin(capsys, "show", "all-reduce", "--ranks", "3", "--strategy", "push", "--count", "40")
    assert code == 0 and not err
    assert out.splitlines()[0].startswith("all-reduce / push, 3 ranks, count 40 float32, reduce sum, out of place")
    for rank in range(3):
        assert f"rank {rank} / channel 0" in out
    assert "steps: 39 (9 stage, 18 notify, 12 consume)" in out
    assert "scratch: 80 elements per rank" in out
    # a push into a peer's scratch, the notify that follows it, and the reduce waiting on it
    assert "r1.scratch[0:40)" in out and "-> r1.flag[0]" in out and "r0.flag[0] <- r1" in out


def test_show_json_is_the_program(capsys):
    code, out, _ = purlin(
        capsys,
        "show",
        "reduce",
        "--ranks",
        "5",
        "--strategy",
        "ring",
        "--root",
        "2",
        "--count",
        "100",
        "--slice-bytes",
        "64",
        "--channels",
        "2",
        "--json",
    )
    assert code == 0
    shown = Program.from_dict(json.loads(out))
    inst = instantiate(load_builtin("reduce"), 5, 100, 4, 2)
    assert shown == derive_program(inst, "ring", "float32", params={"slice_bytes": 64, "channels": 2})
    # the shared size grammar: a unit and a fraction that is whole bytes read the same
    code, again, _ = purlin(
        capsys,
        "show",
        "reduce",
        "--ranks",
        "5",
        "--strategy",
        "ring",
        "--root",
        "2",
        "--count",
        "100",
        "--slice-bytes",
        "0.0625KiB",
        "--channels",
        "2",
        "--json",
    )
    assert code == 0 and again == out


def test_check_runs_the_matrix_and_reports_na(capsys):
    code, out, _ = purlin(
        capsys, "check", "all", "--ranks", "1,3", "--dtype", "float32,bf16", "--count", "1,33", "--json"
    )
    assert code == 0
    data = json.loads(out)
    summary = data["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0 and summary["passed"] > 100
    na = [r for r in data["results"] if r["status"] == "n/a"]
    # every strategy applies to every built-in; only in-place all-to-all is n/a, and the
    # in-place form of a collective whose sizes come per call (its input would move with them)
    assert na and all(
        r["collective"] in ("all-to-all", "all-gather-v", "reduce-scatter-v", "all-to-all-v") and r["inplace"]
        for r in na
    )
    assert any(r["collective"] == "all-to-all" and r["inplace"] and "cannot run in place" in r["note"] for r in na)
    assert {r["dtype"] for r in data["results"] if r["status"] == "pass"} == {"float32", "bfloat16"}
    # every root of a rooted collective
    assert {r["root"] for r in data["results"] if r["collective"] == "gather" and r["ranks"] == 3} == {0, 1, 2}
    assert len(data["results"]) == summary["passed"] + summary["not_applicable"]


def test_check_without_a_terminal_says_how_far_it_got_and_times_each_row(capsys, monkeypatch):
    from purlin_bench.cli import cmd_check

    monkeypatch.setattr(cmd_check, "PROGRESS_LINE_S", 0.0)  # a line after every row but the last
    code, out, err = purlin(capsys, "check", "all-gather", "--ranks", "2,3", "--count", "1,5", "--json")
    assert code == 0
    rows = json.loads(out)["results"]
    ran = [r for r in rows if r["status"] != "n/a"]
    assert ran and all(r["seconds"] is not None and r["seconds"] >= 0 for r in ran)
    lines = [line for line in err.splitlines() if "checked" in line]
    assert len(lines) == len(ran) - 1, err
    assert lines[0].startswith("note: checked 1 of ") and "0 failed" in lines[0]


def test_a_baseline_the_layout_refuses_is_left_out_with_a_note(capsys):
    from purlin_bench.cli.cmd_bench import _baselines
    from purlin_bench.base.errors import PurlinError

    refused = {"nccl": "NCCL refuses two ranks on one GPU"}
    assert _baselines("nccl,default", (), refused) == ("default",)
    assert "baseline nccl left out: NCCL refuses two ranks on one GPU" in capsys.readouterr().err
    assert _baselines("auto", (), refused) == ()  # no strongest one here, and nothing to say
    with pytest.raises(PurlinError, match="unknown baseline 'torch'"):
        _baselines("torch", (), refused)


def test_check_table_and_inplace_modes(capsys):
    code, out, _ = purlin(capsys, "check", "reduce", "--ranks", "2", "--strategy", "ring", "--op", "max", "--inplace")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("│ reduce")]
    assert len(rows) == 2  # two roots, in place only
    assert all("max" in row and "yes" in row and "pass" in row for row in rows)
    assert "all passed: 2 passed" in out
    code, out, _ = purlin(
        capsys, "check", "reduce", "--ranks", "2", "--strategy", "ring", "--inplace", "both", "--json"
    )
    assert {r["inplace"] for r in json.loads(out)["results"]} == {False, True}
    code, out, _ = purlin(capsys, "check", "reduce", "--ranks", "2", "--strategy", "ring", "--no-inplace", "--json")
    assert {r["inplace"] for r in json.loads(out)["results"]} == {False}


def test_check_fails_with_exit_1_when_outputs_are_wrong(capsys, monkeypatch):
    real_outputs = NumpyRunner.outputs

    def corrupt(self, slot=0):
        outputs = real_outputs(self, slot)
        for out in outputs:
            out[:1] += 1  # one wrong element per non-empty output
        return outputs

    monkeypatch.setattr(NumpyRunner, "outputs", corrupt)
    code, out, _ = purlin(capsys, "check", "all-gather", "--ranks", "3", "--strategy", "direct", "--no-inplace")
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("│ all-gather"))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[-3:] == ["3", "FAIL", "3 of 9009 output elements differ from the reference"]  # one per rank
    assert "1 failed: 0 passed, 1 wrong, 0 errors, 0 n/a" in out


def test_check_reports_rank_counts_a_spec_refuses_as_na(capsys, tmp_path):
    spec = tmp_path / "even.yaml"
    spec.write_text("name: even\nop: reduce\nrequires: R % 2 == 0\ninput: [c]\noutput: [c]\n")
    code, out, _ = purlin(capsys, "check", str(spec), "--ranks", "2,3", "--strategy", "ring", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["ranks"], r["status"]) for r in results] == [(2, "pass"), (2, "pass"), (3, "n/a")]
    assert results[-1]["note"] == "even does not support 3 ranks (requires R % 2 == 0)"


# -- a collective written only as YAML ----------------------------------------------


def test_ring_shift_is_listed_shown_and_checked(capsys):
    code, out, _ = purlin(capsys, "list", "--spec", RING_SHIFT, "--json")
    assert code == 0
    entry = json.loads(out)[-1]
    assert (
        entry["name"] == "ring-shift"
        and entry["op"] == "copy"
        and entry["strategies"] == ["direct", "push", "push-parity", "two-shot", "ring"]
    )

    code, out, _ = purlin(capsys, "show", RING_SHIFT, "--ranks", "4", "--strategy", "ring", "--count", "8")
    assert code == 0
    assert out.startswith("ring-shift / ring, 4 ranks")
    assert "r1.out[0:8)" in out  # rank 0 pushes its buffer into rank 1's output

    code, out, _ = purlin(
        capsys, "check", "--spec", RING_SHIFT, "--ranks", "1,2,3,8", "--dtype", "all", "--count", "1,1001", "--json"
    )
    assert code == 0
    data = json.loads(out)
    # 7 dtypes (fp8 too); + in place at 1 rank
    assert data["summary"]["failed"] == 0 and data["summary"]["passed"] == (4 * 7 * 2 + 7 * 2) * len(STRATEGIES)
    assert {r["collective"] for r in data["results"]} == {"ring-shift"}


# -- the real console script ------------------------------------------------------


def test_console_script_check(tmp_path):
    done = subprocess.run(
        [str(PURLIN), "check", RING_SHIFT, "--ranks", "3", "--strategy", "push"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ring-shift" in done.stdout and "all passed" in done.stdout


def test_console_script_bad_input(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: [\n")
    done = subprocess.run([str(PURLIN), "check", "--spec", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("purlin: error: ") and len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [str(PURLIN), "show", "all-reduce", "--ranks", "0"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and done.stderr.splitlines() == ["purlin: error: --ranks must be >= 1, got 0"]
