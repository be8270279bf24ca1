"""Tuning collectives whose sizes come per call (issue 31, item 4): buckets by
total bytes, the counts distribution part of the plan's key (its file name,
its studies, the plan's own ``counts``), read back by export and bench --plan,
and refused where it does not apply. On the CPU reference."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import purlin_bench
from purlin_bench.base.errors import PurlinError
from purlin_bench.plans import load_plan_file
from purlin_bench.plans.io import upgraded
from tests.tools.test_cli import assert_one_line_error, purlin

TUNE = tuple("--backend numpy --ranks 4 --dtype float32 --trials 2 --sizes 1K,16K --confirm 0".split())


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """all-to-all-v tuned twice, on skewed and on hot counts, into one folder."""
    out = tmp_path_factory.mktemp("tuned")
    from purlin_bench.cli.main import run

    for counts in ("skewed", "hot"):
        assert run(["tune", "all-to-all-v", *TUNE, "--counts", counts, "--out", str(out)]) == 0
    return out


def test_each_distribution_is_its_own_plan_keyed_by_total_bytes(tuned):
    skewed = load_plan_file(tuned / "cpu" / "all-to-all-v-4vr-float32-skewed.json")
    hot = load_plan_file(tuned / "cpu" / "all-to-all-v-4vr-float32-hot.json")
    assert (skewed.counts, hot.counts) == ("skewed", "hot")
    assert [e.min_bytes for e in skewed.entries] == [1024, 16384]
    # A row's size is the total its counts add up to (bench's S): here the edges themselves.
    assert [e.measured_bytes for e in skewed.entries] == [1024, 16384]
    assert all("/counts-skewed/" in e.study for e in skewed.entries)
    assert all("/counts-hot/" in e.study for e in hot.entries)


def test_export_says_the_counts(tuned, capsys):
    path = str(tuned / "cpu" / "all-to-all-v-4vr-float32-skewed.json")
    code, out, _ = purlin(capsys, "export", path, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["counts"] for r in rows} == {"skewed"}
    code, out, _ = purlin(capsys, "export", path, "--format", "header")
    assert code == 0 and "PURLIN_PLAN_ALL_TO_ALL_V_4VR_FLOAT32_SKEWED_H" in out and "counts skewed" in out
    code, out, _ = purlin(capsys, "export", path, "--format", "json")
    assert code == 0 and json.loads(out)["counts"] == "skewed"


def test_bench_takes_the_plan_of_its_own_counts_only(tuned, capsys):
    path = str(tuned / "cpu" / "all-to-all-v-4vr-float32-skewed.json")
    bench = ("bench", "all-to-all-v", "--backend", "numpy", "--ranks", "4", "-b", "1K", "-e", "16K", "-f", "16")
    code, out, err = purlin(capsys, *bench, "--counts", "skewed", "--plan", path)
    assert code == 0, err
    code, out, err = purlin(capsys, *bench, "--counts", "uniform", "--plan", path)
    assert_one_line_error(code, out, err, "is a plan for counts skewed, not uniform (--counts)")


def test_load_plan_finds_a_distributions_plan_and_its_callable_refuses_sizes_per_call(tuned):
    tc = purlin_bench.load_plan("all-to-all-v", "float32", 4, backend="numpy", results_dir=tuned, counts="hot")
    assert tc.plan.counts == "hot"
    with pytest.raises(PurlinError, match="takes its sizes per call"):
        tc([])
    with pytest.raises(PurlinError, match="unknown counts 'zipf'"):
        purlin_bench.load_plan("all-to-all-v", "float32", 4, backend="numpy", results_dir=tuned, counts="zipf")


def test_a_plan_must_say_counts_exactly_when_its_sizes_come_per_call(tuned, tmp_path, capsys):
    data = json.loads((tuned / "cpu" / "all-to-all-v-4vr-float32-skewed.json").read_text())
    for collective, counts, fragment in (
        ("all-to-all-v", None, "counts: is null, but all-to-all-v takes its sizes per call"),
        ("all-to-all", "skewed", "all-to-all has fixed sizes: its plan has no counts"),
    ):
        bad = tmp_path / f"{collective}.json"
        bad.write_text(json.dumps({**data, "collective": collective, "counts": counts}))
        code, out, err = purlin(capsys, "export", str(bad), "--format", "csv")
        assert_one_line_error(code, out, err, fragment)


def test_a_version_1_plan_reads_as_fixed_sizes():
    old = {"schema_version": 1, "kind": "purlin-plan", "collective": "all-reduce"}
    assert upgraded(old) == {**old, "schema_version": 2, "counts": None}
    assert upgraded({**old, "schema_version": 2}) == {**old, "schema_version": 2}


def test_a_plan_found_by_name_must_be_of_the_counts_asked(tuned, tmp_path):
    """Whatever its file is called: a skewed plan copied to the uniform name is refused."""
    (tmp_path / "cpu").mkdir()
    data = (tuned / "cpu" / "all-to-all-v-4vr-float32-skewed.json").read_text()
    (tmp_path / "cpu" / "all-to-all-v-4vr-float32-uniform.json").write_text(data)
    with pytest.raises(PurlinError, match="is a plan for counts skewed, not uniform"):
        purlin_bench.load_plan("all-to-all-v", "float32", 4, backend="numpy", results_dir=tmp_path)
    path = tuned / "cpu" / "all-to-all-v-4vr-float32-hot.json"
    with pytest.raises(PurlinError, match="is a plan for counts hot, not skewed"):
        purlin_bench.load_plan(path, counts="skewed")
    assert purlin_bench.load_plan(path).plan.counts == "hot"  # a file given as it is


def test_a_version_1_plan_has_no_counts_field(tmp_path, capsys):
    data = json.loads(next(Path("results").rglob("*.json")).read_text())
    bad = tmp_path / "v1.json"
    bad.write_text(json.dumps({**data, "schema_version": 1}))  # counts present: not a version 1 file
    code, out, err = purlin(capsys, "export", str(bad), "--format", "csv")
    assert_one_line_error(code, out, err, "counts: not a field of schema version 1")


def test_a_backend_without_sizes_per_call_refuses_them_in_one_line(capsys):
    code, out, err = purlin(capsys, "tune", "all-to-all-v", "--backend", "fake", "--ranks", "4", "--sizes", "1K")
    assert_one_line_error(code, out, err, "backend fake runs no variable-size program yet")


def test_the_tuner_never_samples_a_datapath_value_sizes_per_call_cannot_run():
    from purlin_bench.backends import backend_class
    from purlin_bench.base.config import RunConfig
    from purlin_bench.tools.tune.effective import effective_config

    params = backend_class("cupy").params
    sampled = RunConfig.make("push", {}, {"kernel": "compiled", "datapath": "ce", "threads": 128})
    fixed = dict(effective_config(sampled, params).exec_params)
    assert (fixed["kernel"], fixed["datapath"]) == ("compiled", "ce")
    variable = dict(effective_config(sampled, params, variable=True).exec_params)
    # both kernels size slices from the counts (D46); copy engines cannot
    assert (variable["kernel"], variable["datapath"], variable["threads"]) == ("compiled", "sm", 128)


def test_the_progress_label_reads_past_the_counts_segment():
    from purlin_bench.cli.cmd_tune import _label

    study = "purlin/cpu/4vr/all-to-all-v/float32/counts-skewed/[1K, 16K)/at-1K/space-abc"
    assert _label(study) == "all-to-all-v (skewed counts) float32 4vr [1K, 16K)"
    assert _label("purlin/cpu/4vr/all-reduce/float32/[1K, 16K)/at-1K/space-abc") == "all-reduce float32 4vr [1K, 16K)"
