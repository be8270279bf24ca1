"""The user-facing commands on a GPU (cupy backend): `purlin bench` with
its same-run baselines and `purlin tune` through to `load_plan`, every
result checked. Skipped without a GPU, like every ``gpu`` test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from purlin_bench.cli.main import run
from purlin_bench.plans.load import load_plan
from purlin_bench.spec import instantiate, load_builtin

pytestmark = pytest.mark.gpu
RANKS = 4


def test_bench_times_the_configuration_beside_cupy_and_the_default(capsys, tmp_path):
    path = tmp_path / "bench.json"
    code = run(
        [
            "bench",
            "all-reduce",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
            "--backend",
            "cupy",
            "--ranks",
            str(RANKS),
            "--strategy",
            "direct",
            "-n",
            "3",
            "-w",
            "1",
            "-G",
            "3",
            "--baseline",
            "cupy,default",
            "--json",
            str(path),
        ]
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(path.read_text())["results"]
    assert [r["size"] for r in rows] == [1024, 8192, 65536]
    for row in rows:
        assert row["config"]["strategy"] == "direct"
        assert row["out_of_place"]["nwrong"] == 0 and row["in_place"]["nwrong"] == 0
        assert set(row["baselines"]) == {"cupy", "default"} and all(t > 0 for t in row["baselines"].values())
        assert row["speedup"]["default"] == pytest.approx(row["baselines"]["default"] / row["out_of_place"]["time"])


SWEEP = """\
name: gpu-test
sizes: [1K, 64K]
dtypes: [float32]
ranks: [4]
trials: 3
space:
  strategy: [direct, two-shot]
  params:
    channels: [1, 2]
    datapath: [sm, ce]
    blocks: {values: [0, 2], when: {datapath: sm}}
"""


def test_tune_writes_a_plan_that_load_plan_runs_correctly(capsys, tmp_path):
    pytest.importorskip("optuna")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    out = tmp_path / "results"
    code = run(
        [
            "tune",
            "all-reduce",
            "--sweep",
            str(sweep),
            "--backend",
            "cupy",
            "--out",
            str(out),
            "--seed",
            "0",
            "--confirm",
            "1",
        ]
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    (path,) = out.glob("*/all-reduce-4vr-float32.json")
    tuned = load_plan(path)
    assert tuned.backend == "cupy" and [e.min_bytes for e in tuned.plan.entries] == [1024, 65536]
    assert all(e.time_us > 0 and e.default_time_us > 0 for e in tuned.plan.entries)
    rng = np.random.default_rng(0)
    for count in (256, 1 << 14, 100_003):  # each bucket, and a count no slice divides
        inst = instantiate(load_builtin("all-reduce"), RANKS, count, 4, 0)
        inputs = [rng.integers(-8, 8, size=n).astype(np.float32) for n in inst.in_counts]
        for got, want in zip(tuned(inputs), inst.reference(inputs)):
            np.testing.assert_array_equal(got, want)
