"""The compiled datapath's source, without a GPU: what it generates for a
sample of programs (every strategy and dtype, several rank counts), that
nvcc builds it without warnings or spills, and what it refuses."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.atoms import DTYPE_CODES
from purlin_bench.backends.cupy.compiled import MAX_OPS, generate
from purlin_bench.backends.cupy.lower import flag_id, lower
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.errors import PlanError
from purlin_bench.planner import plan
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.backends.cupy.atoms import source_text

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "gather", "scatter")
RANKS = (2, 3, 8)


def sample() -> list[tuple[str, str, int, str]]:
    """Every strategy at every dtype; collectives and rank counts rotate."""
    out = []
    for i, strategy in enumerate(STRATEGIES):
        for j, dtype in enumerate(DTYPE_CODES):
            k = i * len(DTYPE_CODES) + j
            out.append((COLLECTIVES[k % len(COLLECTIVES)], strategy, RANKS[k % len(RANKS)], dtype))
    return out


def program_of(collective: str, strategy: str, ranks: int, dtype: str, count: int = 1001, inplace: bool = False):
    spec = load_builtin(collective)
    inst = instantiate(spec, ranks, count, resolve_dtype(dtype)[1].itemsize, ranks - 1 if spec.rooted else 0)
    return plan(inst, strategy, dtype, "sum" if inst.op == "reduce" else None, {}, inplace)


@pytest.mark.parametrize(("collective", "strategy", "ranks", "dtype"), sample())
def test_every_op_becomes_straight_line_code_with_constant_offsets(collective, strategy, ranks, dtype):
    program = program_of(collective, strategy, ranks, dtype)
    low = lower(program, list(range(ranks)), True, "sm", flag_id)
    source = CupyBackend(ranks).source(program, kernel="compiled")
    body = source.split('extern "C" __global__', 1)[1]
    assert body.count("case ") == len(low.groups)
    # one data movement per copy or reduce op, with its count as a constant
    moving = [op for op in low.ops if op["op"]]
    assert body.count("move_op<") == len(moving)
    for op in moving:
        assert f"{int(op['count'])}ll, {int(op['nsrc'])}, {int(op['ndst'])}, s_src[" in body
    # every wait and notify names its flag as a parameter plus a constant index
    waits = sum(int(op["nwait"]) for op in low.ops)
    assert len(re.findall(r"purlin_wait<\d+>", body)) == sum(1 for op in low.ops if op["nwait"])
    assert sum(int(m) for m in re.findall(r"u64\* const w\[(\d+)\]", body)) == waits
    assert body.count("red_release(") == sum(int(op["nnotify"]) for op in low.ops)
    # nothing is read from an op record: no table, no pointer chasing
    assert "ops[" not in body and "Op*" not in body


def test_the_same_program_generates_the_same_source_and_another_program_another():
    a = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32"), kernel="compiled")
    b = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32"), kernel="compiled")
    c = CupyBackend(8).source(program_of("all-reduce", "two-shot", 8, "float32", count=1002), kernel="compiled")
    assert a == b and a != c  # the disk cache is keyed by the source: one build per program


def test_a_program_past_the_op_bound_is_refused_with_the_way_out():
    # A ring of 16 KiB slices over 4 MiB: thousands of ops.
    spec = load_builtin("all-reduce")
    program = plan(instantiate(spec, 8, 1 << 20, 4), "ring", "float32", "sum", {"slice_bytes": 16384}, False)
    low = lower(program, list(range(8)), True, "sm", flag_id)
    assert len(low.ops) > MAX_OPS
    with pytest.raises(PlanError, match="kernel=interpreted"):
        generate(low, 8, 2, source_text())


@pytest.mark.nvcc
@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch", ("sm_90",))
def test_nvcc_builds_the_sample_without_warnings_or_spills(arch, tmp_path):
    nvcc = shutil.which("nvcc")
    for collective, strategy, ranks, dtype in sample():
        program = program_of(collective, strategy, ranks, dtype)
        source = CupyBackend(ranks).source(program, kernel="compiled")
        options = source.splitlines()[0].removeprefix("// nvrtc ").split()
        path = tmp_path / "compiled.cu"
        path.write_text(source)
        cmd = [nvcc, f"-arch={arch}", "-c", "-Xptxas", "-v", "-Werror", "all-warnings", *options, "-o", str(tmp_path / "compiled.o"), str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        log = done.stdout + done.stderr
        where = f"{collective}/{strategy} R={ranks} {dtype}"
        print(f"[{arch} {where}]", " | ".join(line.strip() for line in log.splitlines() if "registers" in line or "spill" in line))
        assert done.returncode == 0, f"nvcc failed for {where}:\n{log[-3000:]}"
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
        assert spills and max(spills) == 0, f"register spills for {where}:\n{log[-2000:]}"
