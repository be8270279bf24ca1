"""`purlin export` and `purlin_bench.load_plan` read plan files through the
one loader, so they accept and refuse exactly the same files, each refusal
one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from purlin_bench.cli.main import run
from purlin_bench.base.config import RunConfig
from purlin_bench.backends import detect
from purlin_bench.plans import SCHEMA_VERSION, ArtifactError, PlanArtifact, PlanEntry, SweepRef, plan_text
from purlin_bench.plans.load import load_plan

RANKS = 4


def good_plan() -> PlanArtifact:
    entries = (
        PlanEntry(
            8, 65535, 8, RunConfig.make("two-shot", {"channels": 1, "slice_bytes": 0}), 10.0, 0.5, 12.0, None, 3, "s8"
        ),
        PlanEntry(
            65536,
            None,
            65536,
            RunConfig.make("ring", {"channels": 2, "slice_bytes": 0}),
            20.0,
            4.9,
            30.0,
            None,
            3,
            "s64K",
        ),
    )
    return PlanArtifact(
        "all-reduce",
        "float32",
        RANKS,
        "numpy",
        detect("numpy", RANKS),
        "0.1.0",
        "2026-12-02T10:00:00+00:00",
        SweepRef("t", "abc", "tpe", 3, 0),
        entries,
        redop="sum",
    )


def good_data() -> dict[str, Any]:
    return json.loads(plan_text(good_plan(), "good.json"))


def mutated(change: Callable[[dict[str, Any]], None]) -> bytes:
    data = good_data()
    change(data)
    # json.dumps writes NaN and Infinity unless told not to: the bad files a
    # careless writer produces, which this reader must refuse by field.
    return json.dumps(data, indent=2).encode()


def entry(i: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["entries"][i].update(values)


BAD: list[tuple[str, bytes, str]] = [
    ("nan-time", mutated(entry(1, time_us=float("nan"))), "entries[1].time_us: nan is not a finite positive number"),
    ("inf-time", mutated(entry(0, time_us=float("inf"))), "entries[0].time_us: inf is not a finite positive number"),
    (
        "unknown-strategy",
        mutated(lambda d: d["entries"][0]["config"].update(strategy="nccl")),
        "entries[0].config.strategy: expected one of direct, push, push-parity, two-shot, ring, got 'nccl'",
    ),
    (
        "unknown-collective",
        mutated(lambda d: d.update(collective="teleport")),
        "collective: unknown collective 'teleport'",
    ),
    ("empty-entries", mutated(lambda d: d.update(entries=[])), "entries: expected at least 1 item, got 0"),
    ("inverted-bucket", mutated(entry(0, max_bytes=4)), "entries[0].max_bytes: 4 is below min_bytes 8"),
    (
        "overlapping-buckets",
        mutated(entry(0, max_bytes=65536)),
        "entries[1].min_bytes: 65536 overlaps entries[0] (from 8, up to 65536)",
    ),
    (
        "unbounded-then-more",
        mutated(entry(0, max_bytes=None)),
        "entries[1].min_bytes: 65536 overlaps entries[0] (from 8, no upper bound)",
    ),
    (
        "wrong-kind",
        mutated(lambda d: d.update(kind="nccl-tests")),
        "kind: expected 'purlin-plan', got 'nccl-tests' (not a purlin plan)",
    ),
    (
        "newer-schema",
        mutated(lambda d: d.update(schema_version=SCHEMA_VERSION + 1)),
        f"schema_version: plan schema version {SCHEMA_VERSION + 1}"
        f" is newer than this purlin-bench reads ({SCHEMA_VERSION}): upgrade purlin-bench",
    ),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "corrupt plan: not UTF-8 text (byte 0)"),
    ("truncated", plan_text(good_plan(), "x").encode()[:-60], "corrupt plan: not valid JSON (line"),
]


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_bytes(content)
    return path


def export_error(capsys, path: Path) -> tuple[int, str]:
    code = run(["export", str(path), "--format", "header"])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


@pytest.mark.parametrize("name,content,needle", BAD, ids=[b[0] for b in BAD])
def test_both_readers_refuse_with_the_same_line(capsys, tmp_path, name, content, needle):
    path = write(tmp_path, name, content)
    with pytest.raises(ArtifactError) as err:
        load_plan(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message
    code, stderr = export_error(capsys, path)
    assert code != 0 and "Traceback" not in stderr
    assert stderr.splitlines() == [f"purlin: error: {message}"]


def test_a_good_file_is_accepted_by_both(capsys, tmp_path):
    path = write(tmp_path, "good", plan_text(good_plan(), "good.json").encode())
    tuned = load_plan(path)
    assert tuned.plan == good_plan()
    inputs = [np.full(1000, r, dtype=np.float32) for r in range(RANKS)]
    assert all(np.array_equal(out, np.full(1000, 6, dtype=np.float32)) for out in tuned(inputs))
    assert run(["export", str(path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == good_data()


def test_a_users_collective_is_accepted_by_both_given_its_spec(capsys, tmp_path):
    from purlin_bench.spec.loader import load_spec_file

    spec_file = Path(__file__).resolve().parents[2] / "examples" / "ring-shift.yaml"
    spec = load_spec_file(spec_file)
    data = good_data()
    data.update(collective="ring-shift", redop=None)
    path = write(tmp_path, "ring-shift", json.dumps(data).encode())
    code, stderr = export_error(capsys, path)
    assert code != 0 and "collective: unknown collective 'ring-shift'" in stderr
    assert run(["export", str(path), "--format", "csv", "--spec", str(spec_file)]) == 0
    assert "ring-shift" in capsys.readouterr().out
    assert load_plan(path, spec=spec).plan.collective == "ring-shift"
