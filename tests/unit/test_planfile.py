"""Plan files: round trip, the schema generated from the model, writes that
refuse what would not load, and a clear one-line error for every kind of bad
file (corrupt, missing field, newer schema, wrong type, bad buckets)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import DTYPES
from purlin_bench.base.errors import PurlinError
from purlin_bench.backends import detect
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.plans import (
    SCHEMA_VERSION,
    ArtifactError,
    PlanArtifact,
    PlanEntry,
    SweepRef,
    load_plan_file,
    parse_plan,
    plan_path,
    plan_schema,
    plan_text,
    write_plan,
)
from purlin_bench.plans.model import SAMPLERS
from purlin_bench.spec.loader import load_spec_file
from purlin_bench.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]


def make_plan(**changes) -> PlanArtifact:
    entries = (
        PlanEntry(
            8,
            65535,
            16,
            RunConfig.make("two-shot", {"channels": 1, "slice_bytes": 0}),
            10.0,
            0.0016,
            12.5,
            None,
            5,
            "study-8",
        ),
        PlanEntry(
            65536,
            None,
            65536,
            RunConfig.make("ring", {"channels": 2, "slice_bytes": 0}, {"datapath": "sm", "blocks": 4}),
            20.0,
            4.9,
            30.0,
            40.0,
            5,
            "study-64K",
        ),
    )
    plan = PlanArtifact(
        "all-reduce",
        "float32",
        4,
        "numpy",
        detect("numpy", 4),
        "0.1.0",
        "2026-12-02T10:00:00+00:00",
        SweepRef("quick", "0123456789ab", "tpe", 5, 0),
        entries,
        redop="sum",
    )
    return replace(plan, **changes)


def with_entry(i: int, **changes) -> PlanArtifact:
    plan = make_plan()
    entries = list(plan.entries)
    entries[i] = replace(entries[i], **changes)
    return replace(plan, entries=tuple(entries))


def test_round_trip(tmp_path):
    plan = make_plan()
    path = plan_path(tmp_path, "cpu", "all-reduce", "4vr", "float32")
    assert path == tmp_path / "cpu" / "all-reduce-4vr-float32.json"
    write_plan(plan, path)
    loaded = load_plan_file(path)
    assert loaded == plan
    assert loaded.timing == "cpu-reference"  # numpy plans say they are CPU reference timings
    data = json.loads(path.read_text())
    assert (
        data["schema_version"] == SCHEMA_VERSION and data["timing"] == "cpu-reference" and data["kind"] == "purlin-plan"
    )
    assert loaded.entries[1].speedup_over_default() == pytest.approx(1.5)
    assert loaded.entries[1].speedup_over_baseline() == pytest.approx(2.0)
    assert loaded.entries[0].speedup_over_baseline() is None
    assert os.stat(path).st_mode & 0o777 == 0o644  # readable by others, like any result


def test_gpu_plans_are_marked_gpu():
    assert make_plan(backend="cupy").timing == "gpu"


# --------------------------------------------------------------- one definition


def test_committed_schema_is_the_generated_one():
    """Regenerate with: python3 -m purlin_bench.plans --schema > docs/plan.schema.json"""
    committed = (ROOT / "docs" / "plan.schema.json").read_text()
    generated = subprocess.run(
        [sys.executable, "-m", "purlin_bench.plans", "--schema"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert committed == generated
    assert json.loads(committed) == plan_schema()


def test_schema_enums_come_from_the_registries():
    schema = plan_schema()
    assert schema["$defs"]["config"]["properties"]["strategy"]["enum"] == list(STRATEGIES)
    assert schema["properties"]["dtype"]["enum"] == list(DTYPES)


def test_schema_fields_are_the_model_fields():
    data = make_plan().to_dict()
    schema = plan_schema()
    defs = schema["$defs"]
    assert schema["required"] == list(data)
    assert defs["entry"]["required"] == list(data["entries"][0])
    assert defs["sweep"]["required"] == [f.name for f in dataclasses.fields(SweepRef)]
    assert defs["fingerprint"]["required"] == [f.name for f in dataclasses.fields(Fingerprint)]
    assert set(defs["entry"]["required"]) == {f.name for f in dataclasses.fields(PlanEntry)}


def test_samplers_are_the_tuners():
    from purlin_bench.tools.tune.tuner import SAMPLERS as TUNER_SAMPLERS

    assert SAMPLERS == TUNER_SAMPLERS


def test_cli_usage_without_schema_flag():
    result = subprocess.run([sys.executable, "-m", "purlin_bench.plans"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stdout == "" and "--schema" in result.stderr


# --------------------------------------------------------------- writing


@pytest.mark.parametrize(
    "plan,needle",
    [
        (with_entry(0, time_us=math.nan), "entries[0].time_us: nan is not a finite positive number"),
        (with_entry(1, default_time_us=math.inf), "entries[1].default_time_us: inf is not a finite positive number"),
        (with_entry(0, busbw_gbps=math.nan), "entries[0].busbw_gbps: nan is not a finite number"),
        (
            with_entry(0, config=RunConfig.make("nccl", {"channels": 1})),
            "entries[0].config.strategy: expected one of direct, push, push-parity, two-shot, ring, got 'nccl'",
        ),
        (with_entry(0, max_bytes=4), "entries[0].max_bytes: 4 is below min_bytes 8"),
        (make_plan(entries=()), "entries: expected at least 1 item, got 0"),
        (make_plan(collective="teleport"), "collective: unknown collective 'teleport'"),
        (
            with_entry(0, config=RunConfig.make("direct", {"channels": {1, 2}})),
            "entries[0].config.plan_params.channels: expected an integer or a number or a string or a boolean, got set",
        ),
    ],
    ids=[
        "nan",
        "inf",
        "nan-busbw",
        "unknown-strategy",
        "inverted-bucket",
        "no-entries",
        "unknown-collective",
        "unserialisable",
    ],
)
def test_write_refuses_what_would_not_load(tmp_path, plan, needle):
    path = tmp_path / "plan.json"
    with pytest.raises(ArtifactError) as err:
        write_plan(plan, path)
    assert str(err.value).startswith(f"{path}: {needle}") and "\n" not in str(err.value)
    assert os.listdir(tmp_path) == []  # nothing written, no temp file


def test_written_json_is_strict(tmp_path):
    text = plan_text(make_plan(), "p.json")
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == make_plan().to_dict()


def test_write_failure_keeps_the_old_plan(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    write_plan(make_plan(), path)
    before = path.read_text()

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PurlinError, match="plan.json: cannot write: No space left on device"):
        write_plan(make_plan(collective="all-gather"), path)
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["plan.json"]  # no temp file left behind


def test_a_users_collective_needs_its_spec(tmp_path):
    spec = load_spec_file(ROOT / "examples" / "ring-shift.yaml")
    plan = make_plan(collective="ring-shift", redop=None)
    path = tmp_path / "ring-shift.json"
    with pytest.raises(ArtifactError, match="collective: unknown collective 'ring-shift'.*give its spec"):
        write_plan(plan, path)
    write_plan(plan, path, spec)
    assert load_plan_file(path, spec) == plan
    with pytest.raises(ArtifactError, match=r"collective: unknown collective 'ring-shift'"):
        load_plan_file(path)
    with pytest.raises(
        ArtifactError, match=r"collective: the plan is for 'ring-shift', the spec given is 'all-reduce'"
    ):
        load_plan_file(
            make_copy(tmp_path, plan_text(plan, "x", spec)), load_spec_file(ROOT / "collectives" / "all-reduce.yaml")
        )


def make_copy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "copy.json"
    path.write_text(text)
    return path


# --------------------------------------------------------------- reading


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
    (
        "newer schema",
        lambda d: d.update(schema_version=SCHEMA_VERSION + 1),
        f"plan schema version {SCHEMA_VERSION + 1} is newer than this purlin-bench reads",
    ),
    ("wrong type", lambda d: d.update(ranks="8"), "ranks: expected an integer, got a string"),
    (
        "wrong nested type",
        lambda d: d["entries"][1].update(time_us="fast"),
        "entries[1].time_us: expected a number, got a string",
    ),
    ("null where required", lambda d: d["sweep"].update(name=None), "sweep.name: expected a string, got null"),
    ("not a plan", lambda d: d.update(kind="something-else"), "not a purlin plan"),
    ("unknown backend", lambda d: d.update(backend="tpu"), "backend: expected one of numpy, cupy, fake, got 'tpu'"),
    ("float as integer", lambda d: d.update(ranks=8.0), "ranks: expected an integer, got a number"),
    ("unknown field", lambda d: d["sweep"].update(colour="blue"), "sweep.colour: unknown field"),
    ("older schema", lambda d: d.update(schema_version=0), "schema_version: must be >= 1, got 0"),
    ("bad layout", lambda d: d["fingerprint"].update(layout="eight"), "fingerprint.layout: 'eight' does not match"),
    (
        "unsorted entries",
        lambda d: d["entries"].reverse(),
        "entries[1].min_bytes: entries must be sorted by min_bytes, without repeats: 8 follows 65536",
    ),
    (
        "bad param value",
        lambda d: d["entries"][0]["config"]["plan_params"].update(channels=[1]),
        "entries[0].config.plan_params.channels",
    ),
    (
        "config not an object",
        lambda d: d["entries"][0].update(config="ring"),
        "entries[0].config: expected an object, got a string",
    ),
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
    path.write_text(plan_text(make_plan(), "p.json")[:-40])  # truncated
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


def test_the_cli_imports_jsonschema_only_to_read_a_plan():
    code = (
        "import sys; from purlin_bench.cli.main import run; run(['export', '--help']);"
        " print('jsonschema imported:', 'jsonschema' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "--format" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "jsonschema imported: False"
