"""The lab's device scripts, checked on the CPU: a typo in a case or a
kernel would otherwise surface only on the lent GPU, minutes into a call
(lab/scripts/: datapath_survey.py, warm_kernels.py, gather_gap.py,
build_time.py, fanout_shapes.py; device-run.sh). lab/tests/conftest.py puts
lab/scripts/ and the repository root on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from datapath_survey import SETS, parse_case

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.port import check_params
from purlin_bench.tools.bench.run import instances
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import load_builtin

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CASES = sorted({case for cases in SETS.values() for case in cases})


@pytest.mark.parametrize("case", CASES)
def test_every_case_of_every_set_plans(case):
    name, dtype, sizes, config = parse_case(case)
    check_params(CupyBackend, dict(config.exec_params))  # a ProgramError names an unknown or out-of-domain one
    spec = load_builtin(name)
    canonical, _ = resolve_dtype(dtype)
    for row in instances(spec, sizes, 8, canonical, 0):
        inst = row.inst
        derive_program(inst, config.strategy, canonical, "sum" if inst.op == "reduce" else None, dict(config.plan_params), False)


def test_the_compiled_warm_up_builds_what_the_check_runs():
    """lab/scripts/warm_kernels.py --check-compiled: its jobs are the rows the
    check matrix runs (every collective, strategy, root, in and out of place;
    not its n/a rows), each of which must reach a worker process."""
    import json
    import pickle
    import subprocess

    from warm_kernels import check_jobs

    jobs = check_jobs("2,3", "1,1001", "float32,int32")
    done = subprocess.run(
        [sys.executable, "-m", "purlin_bench", "check", "all", "--backend", "numpy", "--ranks", "2,3", "--count", "1,1001", "--dtype", "float32,int32", "--strategy", "all", "--root", "all", "--json"],
        capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    fields = ("collective", "ranks", "root", "count", "dtype", "redop", "strategy", "inplace")
    ran = {tuple(row[f] for f in fields) for row in json.loads(done.stdout)["results"] if row["status"] != "n/a"}
    assert {tuple(getattr(combo, f) for f in fields) for combo, _ in jobs} == ran
    assert len(jobs) == len(ran)
    combo, inst = pickle.loads(pickle.dumps(jobs[-1]))
    assert combo == jobs[-1][0] and inst.in_counts == jobs[-1][1].in_counts


def test_the_runbook_parses_and_its_header_lists_exactly_its_steps():
    import re
    import shutil
    import subprocess

    runbook = SCRIPTS / "device-run.sh"
    done = subprocess.run([shutil.which("bash"), "-n", str(runbook)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    text = runbook.read_text()
    listed = re.search(r"STEP: (.*)", text).group(1).split()
    defined = re.findall(r"^step_([a-z0-9-]+)\(\)", text, flags=re.M)
    assert sorted(listed) == sorted(defined)


@pytest.mark.nvcc
def test_the_gather_gap_kernel_builds(tmp_path):
    """lab/scripts/gather_gap.py's bare kernel is source text put together in
    Python: a typo would surface only on the GPU, as an NVRTC error."""
    from gather_gap import KERNEL, STEPS, step_kernel

    from tests.nvcc_build import assert_builds_without_spills

    source = tmp_path / "gather8.cu"
    source.write_text(KERNEL)
    assert_builds_without_spills(source, [], "sm_90", "gather_gap", tmp_path / "gather8.o")
    for label, *steps in STEPS:
        source.write_text(step_kernel(2, *steps))
        assert_builds_without_spills(source, [], "sm_90", f"gather_gap {label}", tmp_path / "gather8.o")


def test_the_gather_gap_steps_add_one_difference_each():
    """Each step of the bare kernel towards purlin's changes one thing: the
    parameter list, the switch, the loads, in that order."""
    from gather_gap import STEPS, step_kernel

    texts = [step_kernel(2, *steps) for _, *steps in STEPS]
    assert "int per_block" not in texts[0] and "b23" not in texts[0] and "b23" in texts[1]
    assert "switch" not in texts[1] and "switch (blockIdx.x)" in texts[2] and "ld.global.cg" not in texts[2]
    assert "ld.global.cg" in texts[3] and texts[3].count("ld_cg(a") == 8


def test_the_build_time_programs_straddle_the_bound():
    """lab/scripts/build_time.py's programs are the bound's evidence: some taken,
    some refused, each generated past the bound when asked."""
    from build_time import PROGRAMS

    from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight
    from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
    from purlin_bench.base.errors import CapacityError
    from purlin_bench.spec import instantiate

    taken = []
    for name, strategy, count, params, unroll in PROGRAMS:
        inst = instantiate(load_builtin(name), 8, count, 4)
        program = derive_program(inst, strategy, "float32", "sum" if inst.op == "reduce" else None, params, False)
        fits = build_weight(lower(program, list(range(8)), True, "sm", flag_id)) <= MAX_BUILD_WEIGHT
        assert "purlin_compiled" in CupyBackend(8).source(program, bounded=False, kernel="compiled", unroll=unroll)
        if not fits:
            with pytest.raises(CapacityError):
                CupyBackend(8).source(program, kernel="compiled", unroll=unroll)
        taken.append(fits)
    assert any(taken) and not all(taken)


@pytest.mark.nvcc
def test_the_build_time_script_runs(tmp_path):
    import subprocess

    script = SCRIPTS / "build_time.py"
    done = subprocess.run([sys.executable, str(script), "--max-weight", "128", "--jobs", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.endswith(tuple("0123456789")) and " yes " in line]
    assert len(rows) == 4, done.stdout


@pytest.mark.nvcc
@pytest.mark.parametrize("k", (1, 2, 4, 8))
@pytest.mark.parametrize("u", (2, 4, 8))  # the choices of its --unroll
def test_the_fanout_shapes_kernels_build_without_spills(tmp_path, k, u):
    """lab/scripts/fanout_shapes.py times its kernels against a memcpy: a spill
    at some K or U would be timed as the shape's cost."""
    from fanout_shapes import KERNELS

    from tests.nvcc_build import assert_builds_without_spills

    source = tmp_path / "fanout_shapes.cu"
    source.write_text(KERNELS)
    assert_builds_without_spills(source, ["-std=c++17", f"-DFAN_K={k}", f"-DFAN_U={u}"], "sm_90", f"K={k} U={u}", tmp_path / "fanout.o")


@pytest.mark.nvcc
@pytest.mark.parametrize("fan_d", (1, 8))
def test_the_fanout_shapes_bulk_copy_kernels_build(tmp_path, fan_d):
    from fanout_shapes import TMA_KERNELS, TMA_SHAPES

    from tests.nvcc_build import assert_builds_without_spills

    source = tmp_path / "fanout_tma.cu"
    source.write_text(TMA_KERNELS)
    for tile, stages, per_sm in TMA_SHAPES:
        assert tile * stages * per_sm <= 227 << 10  # an H100's or H200's shared memory an SM
        assert (1 << 20) % tile == 0  # whole tiles only: every --mib is a whole number of them
        assert_builds_without_spills(source, ["-std=c++17", f"-DTILE={tile}", f"-DSTAGES={stages}", f"-DFAN_D={fan_d}"], "sm_90", f"tile {tile} x {stages}", tmp_path / "tma.o")


def test_even_counts_add_up_to_the_total_at_16_byte_multiples():
    """lab/scripts/bench_even_counts.py: every count but the last a multiple of 16 bytes, all adding up."""
    import numpy as np
    from bench_even_counts import even_counts

    from purlin_bench.spec import instantiate, load_builtin

    inst = instantiate(load_builtin("reduce-scatter-v"), 8, 1, 2)
    counts = even_counts(inst, 1001, "uniform", np.random.default_rng(0))
    assert sum(counts) == 1001 and len(set(counts[:-1])) == 1 and counts[0] % 8 == 0
