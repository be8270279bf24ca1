"""Compile the Atom sources with nvcc for the GPUs we target (no GPU needed).

Fails on any compiler warning and on register spills, which `-Xptxas -v`
reports; the resource lines are printed so a CI log shows them."""

from __future__ import annotations

import pytest

from purlin_bench.backends.cupy.codegen.atoms import DTYPE_CODES, REDOP_CODES, compile_options
from purlin_bench.base.resources import data_dir
from tests.nvcc_build import assert_builds_without_spills

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
        assert_builds_without_spills(
            source,
            list(options),
            arch,
            f"{dtype}/{redop} unroll={unroll} threads={threads} copy_only={copy_only}",
            tmp_path / "snac.o",
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ARCHS)
def test_the_variable_size_build_compiles_without_spills(arch, tmp_path):
    """PURLIN_VARIABLE (slices sized from counts in device memory) in what
    the -v collectives build: copies (all-gather-v, all-to-all-v) and sums
    (reduce-scatter-v), over the dtypes whose reduce path is the tightest."""
    source = data_dir("atoms") / "snac.cu"
    builds = [("float32", True), ("bfloat16", True), ("float32", False), ("float64", False)]
    if arch != "sm_100":
        # On sm_100 the half-type reduce builds spill 16-40 bytes here (as
        # the jitter build does): a reduce-scatter-v in bfloat16 on a B200 is
        # the one variant that pays it (docs/decisions.md, D44).
        builds += [("bfloat16", False), ("float16", False)]
    for dtype, copy_only in builds:
        options = [*compile_options(dtype, "sum", 2, 512, sys_scope=True, copy_only=copy_only), "-DPURLIN_VARIABLE=1"]
        assert_builds_without_spills(
            source, options, arch, f"variable {dtype} copy_only={copy_only}", tmp_path / "snac.o"
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ["sm_90"])
def test_the_jitter_test_mode_builds_without_spills(arch, tmp_path):
    """PURLIN_JITTER_NS (the test mode's random delays) in the builds it
    reaches: the full and the copy-only interpreter at their default unrolls.
    On sm_90, where it runs (on sm_100 the full build spills a few bytes: a
    test mode's speed does not matter, the default builds' does)."""
    from purlin_bench.backends.cupy.runtime.runner import KernelSettings

    source = data_dir("atoms") / "snac.cu"
    defines = KernelSettings(jitter_ns=2000, jitter_seed=5).defines()
    for unroll, copy_only in ((2, False), (4, True)):
        options = [
            *compile_options("bfloat16", "sum", unroll, 512, sys_scope=True, copy_only=copy_only, defines=defines)
        ]
        assert_builds_without_spills(
            source, options, arch, f"jitter unroll={unroll} copy_only={copy_only}", tmp_path / "snac.o"
        )
