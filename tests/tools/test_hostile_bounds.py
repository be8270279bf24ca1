"""Issue 29, classes 4, 7, 9, 10: bounds on the cost before any work, the
inputs that were tracebacks, checks of what will be written before a tune
measures, and the words of a few refusals (CPU, numpy backend)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from purlin_bench.base.errors import PurlinError
from tests.cli_refusal import purlin, refused

ROOT = Path(__file__).resolve().parents[2]
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
    "--max-bytes",
    "1K",
)


def spec_file(tmp_path: Path, when: str = "", loop: int = 4, chunk: str = "c(i)") -> Path:
    path = tmp_path / "s.yaml"
    condition = f"\n    when: {when}" if when else ""
    path.write_text(
        f"name: s\ndescription: x\nop: copy\ncount: buffer\ninput:\n  - chunk: {chunk}\n"
        f"    for: i in range({loop}){condition}\noutput:\n  - chunk: c(i)\n    for: i in range({loop})\n"
    )
    return path


# -- class 4: the cost is bounded before the work -----------------------------------------


def test_a_program_past_the_step_limit_is_refused_before_it_is_built(capsys):
    refused(capsys, "at most 65536", "show", "all-reduce", "--count", "10000000", "--slice-bytes", "1", seconds=10)


@pytest.mark.parametrize(
    ("when", "loop", "fragment"),
    [
        (" and ".join(["i >= 0"] * 20_000), 16_000, "characters (at most 1024)"),
        (" and ".join(["i >= 0"] * 60), 16_000, "of 23x the work"),
        (None, 4, "characters (at most 1024)"),
    ],
    ids=["20000-clauses", "costly-condition-in-a-long-loop", "3000-terms"],
)
def test_an_expression_is_bounded_by_its_cost_over_its_loop(capsys, tmp_path, when, loop, fragment):
    chunk = "c(" + "+".join(["i"] * 3000) + ")" if when is None else "c(i)"
    refused(capsys, fragment, "list", "--spec", spec_file(tmp_path, when or "", loop, chunk), seconds=10)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--confirm", "1000000000"), "--confirm must be at most 100"),
        (("--timeout", "nan"), "--timeout must be a finite number"),
        (("--timeout", "inf"), "--timeout must be a finite number"),
        (("--seed", "-1"), "--seed"),
        (("--sizes", "1T"), "of memory on the numpy backend"),
    ],
    ids=["confirm", "timeout-nan", "timeout-inf", "seed", "sizes-1T"],
)
def test_tune_bounds_before_any_study(capsys, tmp_path, args, fragment):
    refused(capsys, fragment, "tune", "all-reduce", "--backend", "numpy", "--out", tmp_path, *args)
    assert list(tmp_path.iterdir()) == []


# -- class 7: what were tracebacks --------------------------------------------------------


def test_check_seed_minus_one_is_a_usage_error(capsys):
    refused(capsys, "--seed", "check", "all-reduce", "--seed", "-1")


@pytest.mark.parametrize("where", ["top", "entry"])
def test_unknown_keys_of_mixed_types_are_one_line(capsys, tmp_path, where):
    path = tmp_path / "m.yaml"
    if where == "top":
        path.write_text("name: x\n1: a\nb: c\n")
    else:
        path.write_text(
            "name: x\nop: copy\ncount: buffer\ninput:\n - chunk: c\n   1: 2\n   b: 3\noutput:\n - chunk: c\n"
        )
    refused(capsys, "unknown key(s) ['b', 1]", "list", "--spec", path)


def test_stdout_closed_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-c", "from purlin_bench.cli.main import run; run()", "list"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: __import__("os").close(1),
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "purlin: error: cannot write to stdout: it is closed (redirect it to a file or /dev/null)"
    ], proc.stderr


def test_a_lone_surrogate_in_a_plan_is_one_line(capsys, tmp_path):
    data = json.loads((ROOT / "results" / "h200" / "all-gather-8vr-float32.json").read_text())
    data["fingerprint"]["device_name"] = "\ud800"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))  # json.dumps writes the escape \ud800
    refused(capsys, "lone surrogate", "export", path, "--format", "header")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"ranks": "8"}, "ranks must be a whole number"),
        ({"ranks": 0}, "ranks must be a whole number"),
        ({"spec": "all-reduce"}, "spec must be a CollectiveSpec"),
        ({"gpus": "0"}, "gpus must be a list"),
    ],
    ids=["string-ranks", "zero-ranks", "name-as-spec", "string-gpus"],
)
def test_load_plan_arguments_are_checked(kwargs, fragment):
    import purlin_bench

    with pytest.raises(PurlinError, match=fragment):
        purlin_bench.load_plan("all-reduce", backend="numpy", **kwargs)


def test_a_tuned_collective_refuses_lists_as_inputs():
    import purlin_bench

    plan = purlin_bench.load_plan(
        ROOT / "results" / "h200" / "all-gather-8vr-float32.json", backend="numpy", override=True
    )
    with pytest.raises(PurlinError, match="must be a 1-D array of float32, got list"):
        plan([[1.0] * 8] * 8)
    with pytest.raises(PurlinError, match="must be a list of per-rank arrays"):
        plan("abcdefgh")
    with pytest.raises(PurlinError, match="root must be a rank"):
        plan([np.zeros(8, np.float32)] * 8, root=99)


def test_a_study_database_of_another_optuna_version_is_one_line(capsys, tmp_path):
    assert purlin(capsys, *TUNE, "--out", tmp_path)[0] == 0
    with sqlite3.connect(tmp_path / "tune.db") as db:
        db.execute("update version_info set schema_version=12, library_version='2.0.0'")
        db.execute("update alembic_version set version_num='v2.0.0'")
    refused(capsys, "another Optuna version", *TUNE, "--out", tmp_path, "--force", seconds=30)


# -- class 9: what will be written is checked before the studies ------------------------------


@pytest.mark.parametrize("blocker", ["plan-is-a-folder", "its-folder-is-a-file"])
def test_tune_checks_the_plan_path_before_measuring(capsys, tmp_path, blocker, monkeypatch):
    from purlin_bench.tools.tune import driver

    if blocker == "plan-is-a-folder":
        (tmp_path / "cpu" / "all-reduce-2vr-float32.json").mkdir(parents=True)
    else:
        (tmp_path / "cpu").write_text("x")
    ran = []
    monkeypatch.setattr(driver, "_run_job", lambda *a: ran.append(a))
    refused(capsys, "cannot write the plan", *TUNE, "--out", tmp_path)
    assert not ran  # no study started


# -- class 10: words ----------------------------------------------------------------------------------


def test_a_read_only_study_database_says_so_not_max_length(tmp_path):
    import optuna

    from purlin_bench.tools.tune.storage import _reason

    db = tmp_path / "ro.db"
    optuna.storages.RDBStorage(f"sqlite:///{db}")  # the tables, then read-only below
    storage = optuna.storages.RDBStorage(f"sqlite:///file:{db}?mode=ro&uri=true")
    with pytest.raises(Exception) as caught:
        optuna.create_study(storage=storage, study_name="x")
    reason = _reason(caught.value)
    assert "readonly" in reason and "max length" not in reason
