"""Compile the Atom sources with nvcc for the GPUs we target (no GPU needed).

Fails on any compiler warning and on register spills, which `-Xptxas -v`
reports; the resource lines are printed so a CI log shows them."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from purlin_bench.backends.cupy.atoms import DTYPE_CODES, REDOP_CODES, compile_options
from purlin_bench.resources import data_dir

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
    nvcc = shutil.which("nvcc")
    source = data_dir("atoms") / "snac.cu"
    for k, (dtype, redop, unroll, threads, copy_only) in enumerate(VARIANTS):
        options = [o for o in compile_options(dtype, redop, unroll, threads, sys_scope=bool(k % 2), copy_only=copy_only) if o != "-std=c++17"]
        cmd = [nvcc, "-std=c++17", f"-arch={arch}", "-c", "-Xptxas", "-v", "-Werror", "all-warnings", *options, "-o", str(tmp_path / "snac.o"), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        log = done.stdout + done.stderr
        print(f"[{arch} {dtype} {redop} unroll={unroll} threads={threads} copy_only={copy_only}]", " | ".join(line.strip() for line in log.splitlines() if "registers" in line or "spill" in line))
        assert done.returncode == 0, f"nvcc failed for {arch} {dtype}/{redop}:\n{log}"
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
        assert spills and max(spills) == 0, f"register spills for {arch} {dtype}/{redop} unroll={unroll}:\n{log}"
