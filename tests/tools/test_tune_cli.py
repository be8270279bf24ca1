"""`purlin tune` and `purlin export` from the command line: a tiny tune on
the numpy backend end to end, resuming by trial count, and bad input as one
`purlin: error:` line, a non-zero exit, no traceback and no file written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from purlin_bench.cli.main import run
from purlin_bench.plans import load_plan_file
from purlin_bench.tools.tune.storage import open_storage
from purlin_bench.tools.tune.tuner import count_finished

TINY = """\
name: tiny
sizes: [8, 16K]
dtypes: [float32]
ranks: [4]
trials: 4
space:
  strategy: [direct, push, two-shot, ring]
  params:
    channels: [1, 2]
    datapath: [sm, ce]
    blocks: {values: [0, 4], when: {datapath: sm}}
"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def purlin(capsys, *args: str) -> tuple[int, str, str]:
    code = run([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_error_line(code: int, err: str, needle: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("purlin: error: ") and needle in lines[0], lines[0]
    assert "Traceback" not in err


def test_tune_writes_plans_and_resumes_by_total_trials(capsys, tmp_path, tiny):
    out = tmp_path / "results"
    code, stdout, _ = purlin(
        capsys, "tune", "all-reduce", "--sweep", tiny, "--backend", "numpy", "--out", out, "--seed", "0"
    )
    assert code == 0
    artifact = out / "cpu" / "all-reduce-4vr-float32.json"
    assert f"wrote {artifact}" in stdout and "CPU reference timings" in stdout
    plan = load_plan_file(artifact)
    assert plan.backend == "numpy" and [e.min_bytes for e in plan.entries] == [8, 16384]
    assert plan.sweep.name == "tiny" and all(e.trials == 4 for e in plan.entries)
    # Same command, more trials: each study resumes and ends with exactly 6.
    code, _, _ = purlin(
        capsys,
        "tune",
        "all-reduce",
        "--sweep",
        tiny,
        "--backend",
        "numpy",
        "--out",
        out,
        "--seed",
        "0",
        "--trials",
        "6",
    )
    assert code == 0
    storage = open_storage(f"sqlite:///{out / 'tune.db'}")
    names = optuna.get_all_study_names(storage)
    assert len(names) == 2
    for name in names:
        assert count_finished(optuna.load_study(study_name=name, storage=storage).trials) == 6
    assert all(e.trials == 6 for e in load_plan_file(artifact).entries)


def test_every_trial_is_checked_and_timed_at_each_probe_size(capsys, tmp_path, tiny, monkeypatch):
    from purlin_bench.measure.service import MeasurementService

    checked, timed = [], []
    prepare, compare = MeasurementService.prepare, MeasurementService.compare
    monkeypatch.setattr(
        MeasurementService,
        "prepare",
        lambda self, inst, config, dtype, *a, **kw: (
            checked.append((config, inst.count)) or prepare(self, inst, config, dtype, *a, **kw)
        ),
    )
    monkeypatch.setattr(
        MeasurementService,
        "compare",
        lambda self, inst, configs, dtype, *a, **kw: (
            timed.extend((c, inst.count) for c in configs.values()) or compare(self, inst, configs, dtype, *a, **kw)
        ),
    )
    out = tmp_path / "results"
    code, _, _ = purlin(
        capsys,
        "tune",
        "all-reduce",
        "--sweep",
        tiny,
        "--backend",
        "numpy",
        "--out",
        out,
        "--sizes",
        "8,16K,32K",
        "--max-bytes",
        "16K",
        "--confirm",
        "0",
    )
    assert code == 0
    # [8, 16K) of float32: 8 B, 256 B and 8 KiB are 2, 64 and 2048 elements
    probes = {2, 64, 2048}
    configs = {config for config, _ in timed}
    assert len(configs) > 1
    for config in configs:
        assert {n for c, n in checked if c == config} == probes
        assert {n for c, n in timed if c == config} == probes
    (name,) = optuna.get_all_study_names(open_storage(f"sqlite:///{out / 'tune.db'}"))
    assert "/8/at-8,256,8K/space-" in name


def test_kernels_are_built_before_any_study_is_timed(capsys, tmp_path, tiny, monkeypatch):
    """On a GPU the first use of each kernel variant compiles it; a tune
    builds them all up front, so the studies' timeouts measure trials."""
    from purlin_bench.tools.tune.measure import ServiceBench

    events = []
    measure, prime = ServiceBench.measure, ServiceBench.prime
    monkeypatch.setattr(ServiceBench, "warm_up", lambda self: events.append(("warm", None)) or 18)
    monkeypatch.setattr(
        ServiceBench,
        "prime",
        lambda self, config, bucket: events.append(("prime", bucket.min_bytes)) or prime(self, config, bucket),
    )
    monkeypatch.setattr(
        ServiceBench,
        "measure",
        lambda self, config, bucket: events.append(("measure", bucket.min_bytes)) or measure(self, config, bucket),
    )
    code, stdout, stderr = purlin(
        capsys,
        "tune",
        "all-gather",
        "--sweep",
        tiny,
        "--backend",
        "numpy",
        "--out",
        tmp_path / "r",
        "--trials",
        "2",
        "--confirm",
        "0",
    )
    assert code == 0
    assert events[0] == ("warm", None) and events.count(("warm", None)) == 1
    assert "18 kernel variants ready" in " ".join((stdout + stderr).split())
    # and each bucket's first check (which builds the expected outputs'
    # kernels for its size) happens before its study measures anything
    primed = [size for kind, size in events if kind == "prime"]
    assert len(primed) >= 2 and len(set(primed)) == len(primed)
    for size in primed:
        first_measure = events.index(("measure", size))
        assert events.index(("prime", size)) < first_measure
        assert all(kind == "measure" for kind, _ in events[events.index(("prime", size)) + 1 : first_measure + 1])


def test_export_every_format(capsys, tmp_path, tiny):
    out = tmp_path / "results"
    assert (
        purlin(
            capsys,
            "tune",
            "all-gather",
            "--sweep",
            tiny,
            "--backend",
            "numpy",
            "--out",
            out,
            "--trials",
            "2",
            "--sizes",
            "8",
        )[0]
        == 0
    )
    artifact = out / "cpu" / "all-gather-4vr-float32.json"
    code, stdout, _ = purlin(capsys, "export", artifact, "--format", "json")
    assert code == 0 and json.loads(stdout) == json.loads(artifact.read_text())
    target = tmp_path / "plan.h"
    assert purlin(capsys, "export", artifact, "--format", "header", "--output", target)[0] == 0
    assert "purlin_plan_all_gather_4vr_float32_lookup" in target.read_text()
    code, stdout, _ = purlin(capsys, "export", artifact, "--format", "csv")
    assert code == 0 and len(stdout.strip().splitlines()) == 2
    code, _, err = purlin(capsys, "export", artifact, "--format", "nccl-tuner", "--output", tmp_path / "nccl.conf")
    assert_one_error_line(code, err, "unknown export format 'nccl-tuner' (known: json, csv, header)")
    assert not (tmp_path / "nccl.conf").exists()


def bad_sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text,needle",
    [
        ("sizes: [8\nspace: {strategy: [direct]}\n", "malformed YAML at line"),
        (TINY.replace("channels:", "warp:"), "space.params.warp: unknown parameter 'warp'"),
        (TINY.replace("strategy: [direct, push, two-shot, ring]", "strategy: []"), "space.strategy: empty space"),
        (TINY.replace("channels: [1, 2]", "channels: []"), "space.params.channels: empty space"),
    ],
    ids=["malformed", "unknown-parameter", "empty-strategies", "empty-values"],
)
def test_bad_sweeps(capsys, tmp_path, text, needle):
    path = bad_sweep(tmp_path, text)
    code, _, err = purlin(
        capsys, "tune", "all-reduce", "--sweep", path, "--backend", "numpy", "--out", tmp_path / "out"
    )
    assert_one_error_line(code, err, f"{path}: ")
    assert needle in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["tune", "teleport", "--sweep", "quick"], "unknown collective 'teleport'"),
        (["tune", "all-reduce", "--sweep", "nope"], "unknown sweep 'nope'"),
        (["tune", "all-reduce", "--sampler", "cmaes"], "unknown sampler 'cmaes'"),
        (["tune", "all-reduce", "--trials", "0"], "--trials must be >= 1"),
        (["tune", "all-reduce", "--confirm", "-1"], "--confirm must be >= 0 rounds"),
        (["tune", "all-reduce", "--dtype", "float8"], "unknown dtype 'float8'"),
        (["tune", "all-reduce", "--gpus", "0,1"], "--gpus needs a backend that runs on GPUs"),
        (["tune", "all-reduce", "--sizes", "8,lots"], "--sizes: expected a size like"),
        (["tune", "all-reduce", "--sizes", "8,1.5"], "--sizes: '1.5' is not a whole number of bytes"),
        (["tune", "all-reduce", "--max-bytes=-1K"], "--max-bytes: must not be negative"),
        (["tune", "all-reduce", "--max-bytes", "4"], "no size bucket ends at or below --max-bytes 4"),
        (["tune", "all-reduce", "--storage", "nosuchdb://x/y"], "cannot open study storage nosuchdb://x/y"),
    ],
)
def test_bad_options(capsys, tmp_path, args, needle):
    code, _, err = purlin(capsys, *args, "--backend", "numpy", "--out", tmp_path / "out")
    assert_one_error_line(code, err, needle)
    assert not (tmp_path / "out").exists()


def test_bad_artifacts_for_export(capsys, tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema_version": 1, "kind": ')
    assert_one_error_line(
        *_code_err(purlin(capsys, "export", corrupt, "--format", "json")), "corrupt plan: not valid JSON"
    )
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema_version": 99}))
    assert_one_error_line(*_code_err(purlin(capsys, "export", newer, "--format", "csv")), "schema version 99 is newer")
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"schema_version": 1, "kind": "purlin-plan"}))
    assert_one_error_line(
        *_code_err(purlin(capsys, "export", missing, "--format", "csv")), "missing.json: collective: missing field"
    )
    assert_one_error_line(
        *_code_err(purlin(capsys, "export", missing, "--format", "yaml")), "unknown export format 'yaml'"
    )


def _code_err(result: tuple[int, str, str]) -> tuple[int, str]:
    return result[0], result[2]


def _subprocess(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "purlin_bench.cli.main", *map(str, args)], capture_output=True, text=True, timeout=60
    )


def test_unreachable_storage_from_a_real_process(tmp_path, tiny):
    """As a user sees it: a real process, nothing on port 1."""
    result = _subprocess(
        "tune",
        "all-reduce",
        "--sweep",
        tiny,
        "--backend",
        "numpy",
        "--out",
        tmp_path / "out",
        "--storage",
        "postgresql://127.0.0.1:1/x",
    )
    assert_one_error_line(result.returncode, result.stderr, "cannot open study storage postgresql://127.0.0.1:1/x:")
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_corrupt_artifact_from_a_real_process(tmp_path):
    corrupt = tmp_path / "plan.json"
    corrupt.write_text("{not json")
    result = _subprocess("export", corrupt, "--format", "header", "--output", tmp_path / "plan.h")
    assert_one_error_line(result.returncode, result.stderr, "corrupt plan")
    assert not (tmp_path / "plan.h").exists()


def test_help_does_not_import_optuna():
    """Optuna costs about a second to import: only a tune may pay it."""
    code = (
        "import sys; from purlin_bench.cli.main import run; run(['tune', '--help']);"
        " print('optuna imported:', 'optuna' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--trials" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "optuna imported: False"


def test_a_dtype_or_size_given_twice_is_tuned_once(capsys, tmp_path, tiny, monkeypatch):
    from purlin_bench.tools.tune import driver

    seen = []
    monkeypatch.setattr(driver, "run_tune", lambda request, reporter, storage: seen.append(request) or [])
    code, _, err = purlin(capsys, "tune", "all-reduce", "--sweep", tiny, "--backend", "numpy", "--out",
                          tmp_path / "r", "-d", "float32,f32,float32", "--sizes", "1K,1024,2K")
    assert code == 0, err
    (request,) = seen
    assert request.dtypes == ("float32",)  # f32 is float32: one study, not two of the same
    assert len(request.sweep.buckets) == 2
