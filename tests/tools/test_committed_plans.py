"""The plan artifacts committed in results/: each loads, describes the
machine it came from, and every bucket's configuration plans and runs
correctly against the reference semantics (on the numpy executor, so CI
checks what the GPU tuned)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from purlin_bench.measure.compare import check_program
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.strategies.derive import derive_program
from purlin_bench.plans.load import load_plan
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.plans import load_plan_file
from purlin_bench.strategies import STRATEGIES

RESULTS = Path(__file__).resolve().parents[2] / "results"
PLANS = sorted(RESULTS.glob("*/*.json"))


def test_h200_has_a_plan_for_every_collective_and_dtype():
    names = {p.name for p in PLANS if p.parent.name == "h200"}
    # Collectives whose sizes come per call are tuned in issue 31's GPU phase, not yet.
    fixed = [c.stem for c in (RESULTS.parent / "collectives").glob("*.yaml") if not load_builtin(c.stem).variable]
    want = {f"{c}-8vr-{d}.json" for c in fixed for d in ("float32", "bfloat16")}
    assert len(want) == 16
    assert want <= names, sorted(want - names)


@pytest.mark.parametrize("path", PLANS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_plan_loads_and_names_its_machine(path):
    artifact = load_plan_file(path)
    fp = artifact.fingerprint
    assert path.parent.name == fp.gpu_type
    assert path.name == f"{artifact.collective}-{fp.layout}-{artifact.dtype}.json"
    if fp.gpu_type == "h200":
        assert artifact.backend == "cupy" and fp.device_name == "NVIDIA H200" and fp.compute_capability == "9.0"
    edges = [e.min_bytes for e in artifact.entries]
    assert edges == sorted(set(edges)) and edges[0] == 8
    for entry in artifact.entries:
        assert entry.time_us > 0 and entry.trials >= 1
        assert entry.default_time_us is None or entry.default_time_us > 0


@pytest.mark.parametrize("path", PLANS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_tuned_configuration_is_correct(path):
    artifact = load_plan_file(path)
    spec = load_builtin(artifact.collective)
    itemsize = resolve_dtype(artifact.dtype)[1].itemsize
    # an odd count: uneven chunks, unaligned tails
    inst = instantiate(spec, artifact.ranks, 1001, itemsize, root=artifact.ranks - 1 if spec.rooted else 0)
    for entry in artifact.entries:
        config = entry.config
        assert config.strategy in STRATEGIES
        program = derive_program(inst, config.strategy, artifact.dtype, params=dict(config.plan_params))
        result = check_program(inst, program, NumpyRunner(program))
        assert result.wrong == 0, f"{path.name} bucket {entry.min_bytes}: {config.text()}: {result}"


def test_load_plan_runs_a_committed_plan_on_the_reference(tmp_path):
    path = RESULTS / "h200" / "all-gather-8vr-float32.json"
    tuned = load_plan(path, backend="numpy", override=True)
    inputs = [np.full(300, r, dtype=np.float32) for r in range(8)]
    outputs = tuned(inputs)
    expected = np.repeat(np.arange(8, dtype=np.float32), 300)
    assert all(np.array_equal(o, expected) for o in outputs)
