"""``purlin_bench.load_plan``: entries by message size, correct outputs,
refusal of foreign plans (GPU type, rank layout) unless overridden."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import purlin_bench
from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import PurlinError
from purlin_bench.backends import detect
from purlin_bench.base.hardware import Fingerprint
from purlin_bench.plans.load import TunedCollective, load_plan, plan_lookup
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.plans import ArtifactError, PlanArtifact, PlanEntry, SweepRef, plan_path, write_plan
from purlin_bench.tools.tune.driver import Reporter, TuneRequest, run_tune
from purlin_bench.tools.tune.sweep import parse_sweep
from purlin_bench.tools.tune.tuner import TuneSettings

RANKS = 4
H200 = Fingerprint(
    "cupy",
    "h200",
    f"{RANKS}vr",
    RANKS,
    "4 virtual ranks on GPU 0",
    "NVIDIA H200",
    (0,),
    "9.0",
    132,
    150 << 30,
    "13.0",
    "13.0",
    "x86",
)


def entry(lo, hi, strategy, channels=1, datapath=None) -> PlanEntry:
    exec_params = {"datapath": datapath, "blocks": 8} if datapath else {}
    return PlanEntry(
        lo,
        hi,
        lo,
        RunConfig.make(strategy, {"channels": channels, "slice_bytes": 0}, exec_params),
        10.0,
        1.0,
        12.0,
        None,
        3,
        f"study-{lo}",
    )


def make_plan(collective="all-reduce", fingerprint=None, backend="numpy", dtype="float32") -> PlanArtifact:
    fp = fingerprint or detect("numpy", RANKS)
    copy = collective in ("all-gather", "broadcast", "all-to-all", "gather", "scatter")
    entries = (
        entry(8, 65535, "push" if copy else "two-shot"),
        entry(65536, (1 << 20) - 1, "ring", 2, datapath="sm"),
        entry(1 << 20, None, "direct", 2),
    )
    return PlanArtifact(
        collective,
        dtype,
        RANKS,
        backend,
        fp,
        "0.1.0",
        "2026-12-02T10:00:00+00:00",
        SweepRef("t", "abc", "tpe", 3, 0),
        entries,
        redop="sum" if not copy else None,
    )


@pytest.fixture
def results(tmp_path) -> Path:
    for collective in ("all-reduce", "all-gather", "broadcast"):
        write_plan(make_plan(collective), plan_path(tmp_path, "cpu", collective, f"{RANKS}vr", "float32"))
    return tmp_path


def inputs_for(collective: str, count: int, root: int = 0, seed: int = 0) -> tuple[list[np.ndarray], object]:
    inst = instantiate(load_builtin(collective), RANKS, count, 4, root)
    rng = np.random.default_rng(seed)
    # Small integers in float32: sums are exact, so outputs compare bit for bit.
    return [rng.integers(-8, 8, size=n).astype(np.float32) for n in inst.in_counts], inst


def test_load_plan_is_exported_at_package_level():
    assert purlin_bench.load_plan is load_plan


def test_entries_are_picked_by_message_size(results):
    tuned = load_plan(plan_path(results, "cpu", "all-reduce", f"{RANKS}vr", "float32"))
    assert isinstance(tuned, TunedCollective) and tuned.ranks == RANKS
    assert [tuned.entry_for(n).min_bytes for n in (0, 8, 65535, 65536, (1 << 20) - 1, 1 << 20, 1 << 40)] == [
        8,
        8,
        8,
        65536,
        65536,
        1 << 20,
        1 << 20,
    ]
    assert tuned.config_for(100).strategy == "two-shot"
    assert tuned.config_for(1 << 16) == RunConfig.make(
        "ring", {"channels": 2, "slice_bytes": 0}
    )  # numpy: datapath params dropped


@pytest.mark.parametrize("collective", ["all-reduce", "all-gather", "broadcast"])
@pytest.mark.parametrize("nbytes", [64, 1 << 16, 1 << 20])
def test_outputs_match_the_reference(results, collective, nbytes):
    tuned = load_plan(collective, "float32", RANKS, results_dir=results)
    spec = load_builtin(collective)
    count = spec.count_for_bytes(RANKS, nbytes, 4)
    root = 1 if spec.rooted else 0
    inputs, inst = inputs_for(collective, count, root)
    outputs = tuned(inputs, root=root)
    for got, want in zip(outputs, inst.reference(inputs)):
        np.testing.assert_array_equal(got, want)
    assert tuned.count_of(inputs, root) == count


def test_by_collective_needs_a_plan_for_this_machine(tmp_path):
    with pytest.raises(
        ArtifactError,
        match=r"no tuned plan for all-reduce float32 on cpu .*4vr.*does not exist"
        r" \(run: purlin tune all-reduce --dtype float32 --ranks 4 --out \S+\)",
    ):
        load_plan("all-reduce", "float32", RANKS, results_dir=tmp_path)


def test_foreign_gpu_type_is_refused_with_what_differs(tmp_path):
    path = tmp_path / "h200.json"
    write_plan(make_plan(fingerprint=H200, backend="cupy"), path)
    with pytest.raises(ArtifactError) as err:
        load_plan(path)
    message = str(err.value)
    assert "tuned on h200 (NVIDIA H200), 4vr" in message and "this machine is cpu" in message
    assert "GPU type h200" in message and "override=True" in message
    # Overridden, it runs on the numpy reference (its datapath parameters dropped).
    tuned = load_plan(path, override=True, backend="numpy")
    inputs, inst = inputs_for("all-reduce", 1 << 14)
    for got, want in zip(tuned(inputs), inst.reference(inputs)):
        np.testing.assert_array_equal(got, want)


def test_foreign_rank_layout_is_refused(results):
    path = plan_path(results, "cpu", "all-reduce", f"{RANKS}vr", "float32")
    with pytest.raises(ArtifactError, match="rank layout 4vr vs 8vr"):
        load_plan(path, ranks=8)


def test_a_plan_of_ranks_in_processes_on_a_gpu_opens_no_gpus_itself(tmp_path):
    # Its fingerprint lists every rank's device, (0, 0) for two processes on
    # GPU 0; taken as GPUs to open, a process of the run refused the plan
    # (bench --plan FILE --procs 2 on the H200, 2026-12-03).
    procs = replace(H200, layout="2proc-1gpu", ranks=2, devices=(0, 0), link="2 processes on GPU 0")
    path = tmp_path / "procs.json"
    write_plan(replace(make_plan(fingerprint=procs, backend="cupy"), ranks=2), path)
    tuned = load_plan(path, override=True, backend="numpy")
    inputs = inputs_for("all-reduce", 1 << 10)[0][:2]  # an all-reduce's inputs are alike on every rank
    inst = instantiate(load_builtin("all-reduce"), 2, 1 << 10, 4)
    for got, want in zip(tuned(inputs), inst.reference(inputs)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "layout, devices, backend, opened",
    [
        ("2proc-1gpu", (0, 0), "fake", None),  # the launcher maps ranks in processes to GPUs
        ("nvlink-2", (0, 1), "fake", (0, 1)),  # one process over both GPUs, as tuned
        ("nvlink-2", (0, 1), "numpy", None),  # simulated ranks: no GPUs to open
    ],
)
def test_the_gpus_a_plan_file_opens(tmp_path, layout, devices, backend, opened):
    fp = replace(H200, layout=layout, ranks=2, devices=devices)
    path = tmp_path / "plan.json"
    write_plan(replace(make_plan(fingerprint=fp, backend="cupy"), ranks=2), path)
    tuned = load_plan(path, override=True, backend=backend)
    assert tuned.service().backend.gpus == opened


def test_bad_inputs(results):
    tuned = load_plan("all-reduce", "float32", RANKS, results_dir=results)
    inputs, _ = inputs_for("all-reduce", 64)
    with pytest.raises(PurlinError, match="this plan is for 4 ranks; got 3"):
        tuned(inputs[:3])
    with pytest.raises(PurlinError, match="is float64; this plan is for float32"):
        tuned([x.astype(np.float64) for x in inputs])
    with pytest.raises(PurlinError, match="do not fit all-reduce on 4 ranks"):
        tuned([inputs[0], inputs[1], inputs[2], inputs[3][:10]])


def test_plan_lookup_for_bench(results):
    inst = instantiate(load_builtin("all-reduce"), RANKS, 16, 4)
    lookup = plan_lookup("auto", backend="numpy", ranks=RANKS, dtype="float32", results_dir=results)
    assert lookup(inst, 1 << 16).strategy == "ring"
    path = str(plan_path(results, "cpu", "all-gather", f"{RANKS}vr", "float32"))
    with pytest.raises(ArtifactError, match="is a plan for all-gather, not all-reduce"):
        plan_lookup(path, backend="numpy", ranks=RANKS, dtype="float32")(inst, 64)
    with pytest.raises(ArtifactError, match="is a plan for float32, not bfloat16"):
        plan_lookup(
            str(plan_path(results, "cpu", "all-reduce", f"{RANKS}vr", "float32")),
            backend="numpy",
            ranks=RANKS,
            dtype="bfloat16",
        )(inst, 64)


def test_a_real_tune_then_load_plan(tmp_path):
    sweep = parse_sweep(
        {
            "sizes": [8, "4K"],
            "ranks": [RANKS],
            "trials": 3,
            "space": {"strategy": ["direct", "push"], "params": {"channels": [1, 2]}},
        },
        "t.yaml",
    )
    request = TuneRequest(
        collectives=(load_builtin("all-gather"),),
        sweep=sweep,
        dtypes=("float32",),
        ranks=(RANKS,),
        gpus=None,
        backend="numpy",
        settings=TuneSettings(trials=3, seed=0),
        storage_url=f"sqlite:///{tmp_path / 'tune.db'}",
        out_dir=tmp_path,
    )
    (job,) = run_tune(request, Reporter())
    assert job.path == plan_path(tmp_path, "cpu", "all-gather", f"{RANKS}vr", "float32")
    tuned = load_plan("all-gather", "float32", RANKS, results_dir=tmp_path)
    assert tuned.plan.backend == "numpy" and tuned.plan.timing == "cpu-reference"
    assert [e.min_bytes for e in tuned.plan.entries] == [8, 4096]
    assert all(e.default_time_us is not None and e.time_us <= e.default_time_us for e in tuned.plan.entries)
    inputs, inst = inputs_for("all-gather", 1024)
    for got, want in zip(tuned(inputs), inst.reference(inputs)):
        np.testing.assert_array_equal(got, want)
    assert replace(tuned.plan, created="x") != tuned.plan  # frozen dataclass, compared by value
