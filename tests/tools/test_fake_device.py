"""The device paths of bench and tune on the fake device (backends/fake):
side-by-side turns on a drifting clock, a trial timed as a bench row is,
fast wrong and refused configurations as data, and plan-vs-default, all
without a GPU."""

from __future__ import annotations

import json

import optuna
import pytest

from purlin_bench.backends.fake import FakeBackend, FakeDevice
from purlin_bench.backends.port import TimingPolicy
from purlin_bench.tools.bench.measure import BenchOptions, Measurer
from purlin_bench.cli.main import run
from purlin_bench.base.config import RunConfig
from purlin_bench.measure.service import MeasurementService
from purlin_bench.plans import load_plan_file
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.tools.tune.measure import ServiceBench
from purlin_bench.tools.tune.storage import open_storage
from purlin_bench.tools.tune.sweep import Bucket

SWEEP = """\
name: fake
sizes: [8, 16K]
dtypes: [float32]
ranks: [4]
trials: 24
space:
  strategy: [direct, push, two-shot, ring]
  params:
    channels: [1, 2]
    datapath: [sm, ce]
    blocks: {values: [0, 8], when: {datapath: sm}}
"""


def purlin(capsys, *args):
    code = run([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def service(**device) -> MeasurementService:
    return MeasurementService(FakeBackend(4, device=FakeDevice(**device)))


def test_candidates_side_by_side_share_a_drift_that_one_after_the_other_would_not():
    s = service(drift=0.01)
    inst = instantiate(load_builtin("all-reduce"), 4, 4096, 4)
    config = RunConfig.make("two-shot")
    policy = TimingPolicy(iters=1, warmup=0, reps=9)
    together = s.compare(
        inst, {"a": config, "b": RunConfig.make("two-shot", {"channels": 1})}, "float32", policy=policy
    )
    assert together.us("a") == pytest.approx(together.us("b"), rel=0.015)
    first = s.compare(inst, {"a": config}, "float32", policy=policy).us("a")
    second = s.compare(inst, {"a": config}, "float32", policy=policy).us("a")
    assert second / first > 1.05  # the drift that turns cancel


def test_a_tune_trial_times_a_configuration_as_a_bench_row_does():
    s = service()
    spec = load_builtin("all-gather")
    trial = ServiceBench(s, spec, "float32")
    bench = Measurer(
        s, BenchOptions(TimingPolicy(iters=2, warmup=1, reps=3), inplace=False, baselines=("plain", "default")), None
    )
    for size in (64, 4096):
        inst = trial.instance(Bucket(size, size))
        for config in (s.default_config(inst), RunConfig.make("direct", {"channels": 2}, {"blocks": 8})):
            row = bench.measure(inst, config, "float32", None)
            assert trial.check(config, Bucket(size, size)).ok and row.out_of_place.nwrong == 0
            assert trial.measure(config, Bucket(size, size)) == pytest.approx(row.out_of_place.time_us)
            assert row.baselines["plain"] > row.baselines["default"] > 0


def test_a_prepared_configuration_is_checked_on_the_buffers_it_is_timed_on():
    s = service(wrong_when={"strategy": "ring"})
    inst = instantiate(load_builtin("all-reduce"), 4, 1001, 4)
    assert s.prepare(inst, RunConfig.make("ring"), "float32").nwrong == 1
    assert s.prepare(inst, RunConfig.make("direct"), "float32").nwrong == 0
    assert s.check(inst, RunConfig.make("ring"), "float32").wrong == 1


@pytest.fixture
def planted(monkeypatch):
    """push is ten times faster than anything and wrong; ring is refused;
    direct with 2 channels fails when timed."""
    device = FakeDevice(
        fast_when={"strategy": "push"},
        wrong_when={"strategy": "push"},
        refuse_when={"strategy": "ring"},
        fail_timing_when={"strategy": "direct", "channels": 2},
    )
    monkeypatch.setattr(FakeBackend, "default_device", device)
    return device


def test_a_tune_never_keeps_a_wrong_refused_or_failing_configuration(capsys, tmp_path, planted):
    sweep = tmp_path / "fake.yaml"
    sweep.write_text(SWEEP)
    out = tmp_path / "results"
    code, stdout, err = purlin(
        capsys, "tune", "all-reduce", "--sweep", sweep, "--backend", "fake", "--sampler", "bruteforce", "--out", out
    )
    assert code == 0, err
    plan = load_plan_file(out / "fake" / "all-reduce-4vr-float32.json")
    assert plan.backend == "fake" and plan.timing == "fake" and len(plan.entries) == 2
    for entry in plan.entries:
        assert entry.config.strategy not in ("push", "ring")
        assert not (entry.config.strategy == "direct" and dict(entry.config.plan_params)["channels"] == 2)
        assert entry.default_time_us is not None and entry.time_us <= entry.default_time_us
        assert entry.baseline_time_us > entry.time_us  # the plain baseline, timed beside the default
    storage = open_storage(f"sqlite:///{out / 'tune.db'}")
    for name in optuna.get_all_study_names(storage):
        failures = [t.user_attrs.get("failure", "") for t in optuna.load_study(study_name=name, storage=storage).trials]
        assert any(f.startswith("wrong results") for f in failures)
        assert any("refuses ring" in f for f in failures)
        assert any("watchdog" in f for f in failures)


def test_plan_against_the_default_side_by_side(capsys, tmp_path):
    sweep = tmp_path / "fake.yaml"
    sweep.write_text(SWEEP)
    out = tmp_path / "results"
    assert (
        purlin(
            capsys,
            "tune",
            "all-reduce",
            "--sweep",
            sweep,
            "--backend",
            "fake",
            "--trials",
            "8",
            "--seed",
            "1",
            "--out",
            out,
        )[0]
        == 0
    )
    rows = tmp_path / "cmp.json"
    plan = out / "fake" / "all-reduce-4vr-float32.json"
    code, stdout, err = purlin(
        capsys,
        "bench",
        "all-reduce",
        "--backend",
        "fake",
        "--ranks",
        "4",
        "-b",
        "8",
        "-e",
        "32K",
        "-f",
        "8",
        "--plan",
        plan,
        "--baseline",
        "auto,default",
        "--json",
        rows,
    )
    assert code == 0, err
    results = json.loads(rows.read_text())["results"]
    assert len(results) == 5 and all(set(r["baselines"]) == {"plain", "default"} for r in results)
    # the guard: a plan never runs slower than the default it replaced
    assert all(r["speedup"]["default"] >= 1.0 for r in results)
    assert "# Speed-up vs default" in stdout


def test_fake_device_bad_parameters_are_refused_like_a_real_one():
    from purlin_bench.base.errors import ProgramError

    s = service()
    inst = instantiate(load_builtin("all-reduce"), 4, 64, 4)
    with pytest.raises(ProgramError, match="unknown datapath parameter"):
        s.prepare(inst, RunConfig.make("direct", {}, {"unroll": 4}), "float32")
    with pytest.raises(ProgramError, match="blocks must be in"):
        s.prepare(inst, RunConfig.make("direct", {}, {"blocks": 99}), "float32")


def test_a_comparison_of_big_configurations_keeps_every_one_it_times():
    """Preparing a big configuration lets go of those of other sizes, never
    of the ones the same comparison just prepared (it timed a closed runner)."""
    s = service()
    small = instantiate(load_builtin("all-reduce"), 4, 1024, 4)
    big = instantiate(load_builtin("all-reduce"), 4, 1 << 20, 4)  # 32 MiB a buffer set, 8 sets
    s.prepare(small, RunConfig.make("direct"), "float32")
    compared = s.compare(
        big,
        {"a": RunConfig.make("ring"), "b": RunConfig.make("two-shot"), "c": RunConfig.make("direct")},
        "float32",
        policy=TimingPolicy(1, 0, 1),
    )
    assert set(compared.times) == {"a", "b", "c"} and all(t.median_us > 0 for t in compared.times.values())
    assert all(p.inst == big for p in s._prepared.values())
