"""Killing `purlin tune` (SIGKILL) mid-study and running it again with the
same storage loses no completed trial and finishes the study with exactly
the asked number of trials (numpy backend, the default SQLite storage)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from purlin_bench.plans import load_plan_file

TRIALS = 8
# 1 MiB all-reduce on 4 simulated ranks: a few tenths of a second per trial,
# long enough to be caught mid-trial, short enough for CI.
SWEEP = f"""\
name: resume
sizes: [1M]
dtypes: [float32]
ranks: [4]
trials: {TRIALS}
space:
  strategy: [direct, push, two-shot, ring]
  params:
    channels: [1, 2]
"""


def trials(db: Path) -> list[dict]:
    """The study's trials, read with plain SQL (as another process would)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        rows = con.execute("SELECT trial_id, number, state FROM trials ORDER BY number").fetchall()
        attrs = con.execute("SELECT trial_id, key, value_json FROM trial_user_attributes").fetchall()
        system = con.execute("SELECT trial_id, key, value_json FROM trial_system_attributes").fetchall()
        params = con.execute("SELECT trial_id, param_name, param_value FROM trial_params").fetchall()
        values = dict(con.execute("SELECT trial_id, value FROM trial_values").fetchall())
    by_id = {
        tid: {"number": n, "state": state, "value": values.get(tid), "attrs": {}, "system": {}, "params": {}}
        for tid, n, state in rows
    }
    for tid, key, value in attrs:
        by_id[tid]["attrs"][key] = json.loads(value)
    for tid, key, value in system:
        by_id[tid]["system"][key] = json.loads(value)
    for tid, name, value in params:
        by_id[tid]["params"][name] = value
    return sorted(by_id.values(), key=lambda t: t["number"])


def counted(rows: list[dict]) -> list[dict]:
    return [t for t in rows if t["state"] == "COMPLETE" or (t["state"] == "FAIL" and "failure" in t["attrs"])]


def wait_mid_study(db: Path, proc: subprocess.Popen, deadline_s: float = 90) -> list[dict]:
    """Wait until 2 trials are done and a third is being evaluated."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"purlin tune ended before it could be killed:\n{proc.stderr.read().decode()}")
        if db.exists():
            try:
                rows = trials(db)
            except sqlite3.Error:  # tables not made yet, or a writer holds the lock
                rows = []
            running = [t for t in rows if t["state"] == "RUNNING" and "config" in t["attrs"]]
            if len(counted(rows)) >= 2 and running:
                return rows
        time.sleep(0.02)
    pytest.fail("purlin tune did not get mid-study in time")


def test_sigkill_mid_study_then_resume(tmp_path):
    sweep = tmp_path / "resume.yaml"
    sweep.write_text(SWEEP)
    out = tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "purlin_bench.cli.main",
        "tune",
        "all-reduce",
        "--sweep",
        str(sweep),
        "--backend",
        "numpy",
        "--out",
        str(out),
        "--sampler",
        "bruteforce",
        "--seed",
        "0",
    ]
    db = out / "tune.db"

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_mid_study(db, proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = trials(db)
    done_before = {t["number"]: t["value"] for t in counted(before)}
    killed = [t["number"] for t in before if t["state"] == "RUNNING"]
    assert len(done_before) >= 2 and killed
    assert not (out / "cpu").exists()  # the plan is written only when the study is done

    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr

    after = trials(db)
    done_after = {t["number"]: t["value"] for t in counted(after)}
    assert len(done_after) == TRIALS  # exactly the asked number, across both runs
    for number, value in done_before.items():  # nothing completed was lost or redone
        assert done_after[number] == value
    by_number = {t["number"]: t for t in after}
    for number in killed:  # the trial cut short failed with no reason (not counted), then ran again as it was
        assert by_number[number]["state"] == "FAIL" and "failure" not in by_number[number]["attrs"]
        retries = [t for t in after if t["system"].get("failed_trial") == number]
        assert (
            len(retries) == 1 and retries[0] in counted(after) and retries[0]["params"] == by_number[number]["params"]
        )
    assert not [t for t in after if t["state"] in ("RUNNING", "WAITING")]
    plan = load_plan_file(out / "cpu" / "all-reduce-4vr-float32.json")
    assert plan.entries[0].trials == TRIALS
