"""Plan artifacts: round trip, atomic writes, and a clear error for every
kind of bad file (corrupt, missing field, newer schema, wrong type)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from purlin_bench.config import RunConfig
from purlin_bench.hardware import detect
from purlin_bench import atomic
from purlin_bench.errors import PurlinError
from purlin_bench.tune.artifact import SCHEMA_VERSION, ArtifactError, PlanArtifact, PlanEntry, SweepRef, load_plan_file, parse_plan, plan_path, write_plan


def make_plan(**changes) -> PlanArtifact:
    entries = (
        PlanEntry(8, 65535, 16, RunConfig.make("two-shot", {"channels": 1, "slice_bytes": 0}), 10.0, 0.0016, 12.5, None, 5, "study-8"),
        PlanEntry(65536, None, 65536, RunConfig.make("ring", {"channels": 2, "slice_bytes": 0}, {"datapath": "sm", "blocks": 4}), 20.0, 4.9, 30.0, 40.0, 5, "study-64K"),
    )
    plan = PlanArtifact("all-reduce", "float32", 4, "numpy", detect("numpy", 4), "0.1.0", "2026-12-02T10:00:00+00:00", SweepRef("quick", "0123456789ab", "tpe", 5, 0), entries, redop="sum")
    return replace(plan, **changes)


def test_round_trip(tmp_path):
    plan = make_plan()
    path = plan_path(tmp_path, "cpu", "all-reduce", "4vr", "float32")
    assert path == tmp_path / "cpu" / "all-reduce-4vr-float32.json"
    write_plan(plan, path)
    loaded = load_plan_file(path)
    assert loaded == plan
    assert loaded.timing == "cpu-reference"  # numpy plans say they are CPU reference timings
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["timing"] == "cpu-reference" and data["kind"] == "purlin-plan"
    assert loaded.entries[1].speedup_over_default() == pytest.approx(1.5)
    assert loaded.entries[1].speedup_over_baseline() == pytest.approx(2.0)
    assert loaded.entries[0].speedup_over_baseline() is None


def test_gpu_plans_are_marked_gpu():
    assert make_plan(backend="cupy").timing == "gpu"


def test_write_is_atomic_when_the_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    write_plan(make_plan(), path)
    before = path.read_text()

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(PurlinError, match="cannot write: No space left on device"):
        write_plan(make_plan(collective="all-gather"), path)
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["plan.json"]  # no temp file left behind


def test_write_is_atomic_when_writing_fails_midway(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "plan.json"

    def crash(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", crash)
    with pytest.raises(PurlinError, match="plan.json: cannot write: Input/output error"):
        write_plan(make_plan(), path)
    assert not path.exists() and os.listdir(path.parent) == []


def test_unserialisable_plan_writes_nothing(tmp_path):
    path = tmp_path / "plan.json"
    bad = make_plan(entries=(replace(make_plan().entries[0], config=RunConfig.make("direct", {"channels": {1, 2}})),))
    with pytest.raises(TypeError):
        write_plan(bad, path)
    assert os.listdir(tmp_path) == []


def _broken(tmp_path, mutate) -> str:
    data = make_plan().to_dict()
    mutate(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return str(path)


BAD = [
    ("missing field", lambda d: d["entries"][0].pop("time_us"), "entries[0].time_us: missing field"),
    ("missing fingerprint field", lambda d: d["fingerprint"].pop("gpu_type"), "fingerprint.gpu_type: missing field"),
    ("missing entries", lambda d: d.pop("entries"), "entries: missing field"),
    ("newer schema", lambda d: d.update(schema_version=SCHEMA_VERSION + 1), f"plan schema version {SCHEMA_VERSION + 1} is newer than this purlin-bench reads"),
    ("wrong type", lambda d: d.update(ranks="8"), "ranks: expected an integer, got a string"),
    ("wrong nested type", lambda d: d["entries"][1].update(time_us="fast"), "entries[1].time_us: expected a number, got a string"),
    ("null where required", lambda d: d["sweep"].update(name=None), "sweep.name: expected a string, got null"),
    ("not a plan", lambda d: d.update(kind="something-else"), "not a purlin plan"),
    ("unknown backend", lambda d: d.update(backend="tpu"), "backend: expected numpy or cupy"),
    ("unsorted entries", lambda d: d["entries"].reverse(), "must be sorted by min_bytes"),
    ("bad param value", lambda d: d["entries"][0]["config"]["plan_params"].update(channels=[1]), "entries[0].config.plan_params.channels"),
    ("config not an object", lambda d: d["entries"][0].update(config="ring"), "entries[0].config: expected an object, got a string"),
]


@pytest.mark.parametrize("mutate,needle", [pytest.param(m, n, id=name) for name, m, n in BAD])
def test_invalid_plans_name_file_and_field(tmp_path, mutate, needle):
    path = _broken(tmp_path, mutate)
    with pytest.raises(ArtifactError) as err:
        load_plan_file(path)
    assert str(err.value).startswith(path) and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_corrupt_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(make_plan().to_json()[:-40])  # truncated
    with pytest.raises(ArtifactError, match=r"plan\.json: corrupt plan: not valid JSON \(line \d+, column \d+"):
        load_plan_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="cannot read"):
        load_plan_file(tmp_path / "nope.json")


def test_not_an_object():
    with pytest.raises(ArtifactError, match="x.json: top level: expected an object, got a list"):
        parse_plan([1, 2], "x.json")


def test_integers_are_accepted_as_times(tmp_path):
    path = _broken(tmp_path, lambda d: d["entries"][0].update(time_us=10))
    assert load_plan_file(path).entries[0].time_us == 10.0
