"""Compile the Atom sources with nvcc for the GPUs we target (no GPU needed).

Fails on any compiler warning and on register spills, which `-Xptxas -v`
reports; the resource lines are printed so a CI log shows them."""

from __future__ import annotations

import pytest

from purlin_bench.backends.cupy.atoms import DTYPE_CODES, REDOP_CODES, compile_options
from purlin_bench.resources import data_dir
from tests.nvcc_build import assert_builds_without_spills, ptx_of

pytestmark = pytest.mark.nvcc

ARCHS = ("sm_80", "sm_90", "sm_100")
# Every dtype at every unroll with sum, every reduction with float32, the
# smallest block bound, and the copy-only build: the variants that differ
# in generated code. (Reductions run near the 128-register cap, and which
# variant spills first has moved with every change to the kernel.)
VARIANTS = (
    [(d, "sum", u, 512, False) for d in DTYPE_CODES for u in (1, 2, 4)]
    + [("float32", r, 2, 512, False) for r in REDOP_CODES if r != "sum"]
    + [("float32", "sum", 1, 128, False), ("float16", "max", 4, 512, False)]
    + [(d, "sum", u, 512, True) for d in ("float32", "bfloat16", "float64") for u in (1, 4)]
)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch", ARCHS)
def test_atoms_compile_without_warnings_or_spills(arch, tmp_path):
    source = data_dir("atoms") / "snac.cu"
    for k, (dtype, redop, unroll, threads, copy_only) in enumerate(VARIANTS):
        options = compile_options(dtype, redop, unroll, threads, sys_scope=bool(k % 2), copy_only=copy_only)
        assert_builds_without_spills(source, list(options), arch, f"{dtype}/{redop} unroll={unroll} threads={threads} copy_only={copy_only}", tmp_path / "snac.o")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ARCHS)
def test_copy_only_builds_bound_to_1024_threads_an_sm_do_not_spill(arch, tmp_path):
    """kernel_ab.py's "now-copy-1024": two 512-thread blocks an SM (64
    registers a thread) for the copy-only interpreter at every unroll."""
    from purlin_bench.backends.cupy.executor import KernelSettings

    source = data_dir("atoms") / "snac.cu"
    for unroll in (1, 2, 4):
        settings = KernelSettings(copy_sm_threads=1024)
        options = [*compile_options("bfloat16", "sum", unroll, 512, sys_scope=False, copy_only=True, defines=settings.defines(True, 512))]
        assert_builds_without_spills(source, options, arch, f"copy-only, 1024 threads an SM, unroll={unroll}", tmp_path / "snac.o")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hint", [".cs", ".L1::no_allocate"])
def test_the_fan_out_store_hints_build_and_reach_every_vector_store(hint, tmp_path):
    """The A/B switches of scripts/kernel_ab.py's store variants: each builds
    without spills, and every 16-byte store of the copy path carries it."""
    import re

    source = data_dir("atoms") / "snac.cu"
    options = [*compile_options("float32", "sum", 4, 512, sys_scope=False, copy_only=True), f'-DPURLIN_ST_HINT="{hint}"']
    assert_builds_without_spills(source, options, "sm_90", f"st hint {hint}", tmp_path / "snac.o")
    stores = re.findall(r"\bst\.global(\S*)\.v4\.u32", ptx_of(source, options, "sm_90", tmp_path / "snac.ptx"))
    assert stores and all(q == hint for q in stores), sorted(set(stores))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ARCHS)
def test_the_pipelined_copy_experiment_builds_without_spills_and_loads_a_round_ahead(arch, tmp_path):
    """PURLIN_PIPELINE=1 (scripts/kernel_ab.py's "now-pipelined"): the
    copy-only build at the unrolls it would run has no spills and, in its
    PTX, a round of vector loads ahead of the loop (twice the loads of the
    plain loop); the full build is left as it is."""
    import re

    source = data_dir("atoms") / "snac.cu"
    for unroll in (1, 2, 4):
        options = [*compile_options("bfloat16", "sum", unroll, 512, sys_scope=False, copy_only=True), "-DPURLIN_PIPELINE=1"]
        assert_builds_without_spills(source, options, arch, f"pipelined unroll={unroll}", tmp_path / "snac.o")

    def vector_ops(copy_only: bool, pipeline: int) -> str:
        options = [*compile_options("float32", "sum", 4, 512, sys_scope=False, copy_only=copy_only), f"-DPURLIN_PIPELINE={pipeline}"]
        found = re.findall(r"\b(ld\.global\.cg\S*\.v4|st\.global\S*\.v4)", ptx_of(source, options, arch, tmp_path / f"snac-{copy_only}-{pipeline}.ptx"))
        return "".join("L" if m.startswith("ld") else "S" for m in found)

    plain, pipelined = vector_ops(True, 0), vector_ops(True, 1)
    # (stores are not compared: on sm_100 the plain copy-only loop keeps its
    # destinations rolled, see move_op)
    assert "S" in pipelined and pipelined.count("L") == 2 * plain.count("L"), (plain, pipelined)
    assert vector_ops(False, 1) == vector_ops(False, 0)
