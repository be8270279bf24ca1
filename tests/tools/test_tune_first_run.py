"""A CPU user's first `purlin tune` (issue 15): short defaults said in one
note, one plain progress line per study, a complete plan left alone unless
--force, resuming said with the trials kept, Ctrl-C as one line and exit 130,
CPU plans outside the tracked results/, hints that are quick where shown."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from purlin_bench.backends import backend_class
from purlin_bench.cli.cmd_tune import _backend_limits
from purlin_bench.cli.main import run
from purlin_bench.plans.load import CPU_RESULTS, DEFAULT_RESULTS, default_results_dir, load_plan, tune_hint
from purlin_bench.tools.tune.measure import ServiceBench
from purlin_bench.tools.tune.storage import open_storage
from purlin_bench.tools.tune.sweep import resolve_sweep
from purlin_bench.tools.tune.tuner import count_finished

CPU = "numpy"  # the backend a machine without a GPU gets

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
"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def purlin(capsys, *args) -> tuple[int, str, str]:
    code = run([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tune(capsys, tiny, out, *extra):
    return purlin(capsys, "tune", "all-reduce", "--sweep", tiny, "--backend", CPU, "--out", out, "--seed", "0", *extra)


def finished_trials(out: Path) -> int:
    storage = open_storage(f"sqlite:///{out / 'tune.db'}")
    return sum(
        count_finished(optuna.load_study(study_name=n, storage=storage).get_trials(deepcopy=False))
        for n in optuna.get_all_study_names(storage)
    )


def test_cpu_defaults_keep_small_buckets_and_few_trials_in_one_note():
    cls = backend_class(CPU)
    full = resolve_sweep("default")
    sweep, trials, note = _backend_limits(cls, full, None, None, sweep_given=False)
    assert sweep.buckets and all(b.max_bytes is not None and b.max_bytes < 65536 for b in sweep.buckets)
    assert trials == cls.default_tune_trials < full.trials
    assert f"{len(sweep.buckets)} of {len(full.buckets)} size buckets" in note and f"{trials} trials per study" in note
    # Asked for, nothing is cut and nothing is said.
    sweep, trials, note = _backend_limits(cls, full, "1G", 40, sweep_given=False)
    assert (
        len(sweep.buckets) == len(full.buckets) and trials == 40 and note is None
    )  # [1G, inf) is measured at 1G alone
    # A cap keeps the buckets that end at or below it: [256M, 1G) starts below 512M but is measured up to 512M.
    assert [b.min_bytes for b in _backend_limits(cls, full, "512M", None, sweep_given=False)[0].buckets][-1] == 16 << 20
    # A sweep the user names keeps its trial count (workers sharing a study agree on it).
    assert _backend_limits(cls, full, None, None, sweep_given=True)[1] is None
    # A sweep whose smallest bucket ends above the default cap still tunes that one bucket.
    coarse = full.with_sizes([1 << 20, 1 << 24])
    sweep, _, note = _backend_limits(cls, coarse, None, None, sweep_given=False)
    assert [b.min_bytes for b in sweep.buckets] == [1 << 20] and "1 of 2 size buckets" in note


def test_progress_is_one_plain_line_per_study_after_its_finals(capsys, tmp_path, tiny):
    code, _, err = tune(capsys, tiny, tmp_path / "r")
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("study ")]
    assert len(lines) == 2, err
    assert (
        lines[0].startswith("study 1/2 all-reduce float32 4vr [8, 16K): 4/4 trials (4 run now), finals done")
        and "s left" in lines[0]
    )
    assert lines[1].startswith("study 2/2 all-reduce float32 4vr [16K, inf): 4/4 trials") and "left" not in lines[1]
    assert "\x1b[" not in err  # plain text, no terminal codes


def test_rerun_of_a_finished_tune_measures_nothing_unless_forced(capsys, tmp_path, tiny, monkeypatch):
    out = tmp_path / "r"
    assert tune(capsys, tiny, out)[0] == 0
    artifact = out / "cpu" / "all-reduce-4vr-float32.json"
    before = artifact.read_bytes()

    def no_measuring(self, *a, **kw):
        raise AssertionError("a finished tune measured again")

    monkeypatch.setattr(ServiceBench, "measure", no_measuring)
    monkeypatch.setattr(ServiceBench, "side_by_side", no_measuring)
    code, stdout, err = tune(capsys, tiny, out)
    assert code == 0 and f"up to date: {artifact}" in err and "wrote" not in stdout
    assert artifact.read_bytes() == before
    monkeypatch.undo()
    code, stdout, _ = tune(capsys, tiny, out, "--force")
    assert code == 0 and f"wrote {artifact}" in stdout and artifact.read_bytes() != before  # a new date and finals


def test_resume_says_how_many_trials_it_keeps(capsys, tmp_path, tiny):
    out = tmp_path / "r"
    assert tune(capsys, tiny, out)[0] == 0
    code, _, err = tune(capsys, tiny, out, "--trials", "6")
    assert code == 0
    assert "resuming all-reduce float32 4vr [8, 16K): 4 finished trials kept, 2 to run" in err
    assert "resuming all-reduce float32 4vr [16K, inf): 4 finished trials kept, 2 to run" in err
    assert finished_trials(out) == 12


def test_ctrl_c_is_one_line_exit_130_and_the_rerun_resumes(capsys, tmp_path, tiny, monkeypatch):
    out = tmp_path / "r"
    measure = ServiceBench.measure
    calls = []

    def interrupted_on_the_sixth(self, config, bucket):
        calls.append(config)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return measure(self, config, bucket)

    monkeypatch.setattr(ServiceBench, "measure", interrupted_on_the_sixth)
    code, _, err = tune(capsys, tiny, out, "--sampler", "bruteforce")
    kept = finished_trials(out)
    assert code == 130 and 0 < kept < 8
    assert err.strip().splitlines()[-1] == f"interrupted: {kept} trials kept; rerun the same command to resume"
    assert "Traceback" not in err and "error" not in err
    monkeypatch.undo()
    code, _, err = tune(capsys, tiny, out, "--sampler", "bruteforce")
    assert code == 0 and "finished trials kept" in err
    assert finished_trials(out) == 8


def test_cpu_plans_go_outside_the_tracked_results_and_are_found_there(capsys, tmp_path, tiny, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = purlin(capsys, "tune", "all-reduce", "--sweep", tiny, "--backend", CPU, "--seed", "0")
    assert code == 0
    assert (tmp_path / CPU_RESULTS / "cpu" / "all-reduce-4vr-float32.json").exists() and not (
        tmp_path / DEFAULT_RESULTS
    ).exists()
    assert load_plan("all-reduce", "float32", 4, backend=CPU).source == str(
        Path(CPU_RESULTS) / "cpu" / "all-reduce-4vr-float32.json"
    )
    code, stdout, _ = purlin(
        capsys, "bench", "all-reduce", "--backend", CPU, "--ranks", "4", "-b", "8", "-e", "64", "--plan", "auto"
    )
    assert code == 0, stdout
    repo = Path(__file__).resolve().parents[2]
    assert f"/{CPU_RESULTS}/" in (repo / ".gitignore").read_text().splitlines()


def test_the_missing_plan_hint_is_quick_on_its_machine():
    assert default_results_dir(CPU) == CPU_RESULTS
    # A GPU's default sweep takes hours; the hint names the quick one.
    assert tune_hint("all-reduce", "float32", "cupy", 8, None, None).startswith(
        "purlin tune all-reduce --dtype float32 --sweep quick"
    )
    # The CPU reference's own defaults are the quick tune there.
    cpu = tune_hint("all-reduce", "bfloat16", CPU, 4, None, "elsewhere")
    assert "--sweep" not in cpu and cpu.endswith("--ranks 4 --out elsewhere")
