"""The baseline for ranks as processes (backends/cupy/baselines/ipc.py)
without a GPU: its work list follows the dataflow of every collective, and
its kernel builds with nvcc."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.cupy.baselines.ipc import _KERNEL, tasks_of
from purlin_bench.backends.cupy.codegen.lower import MAX_SRC
from purlin_bench.spec import instantiate, load_all_builtin

# The built-ins of fixed sizes (no baseline of sizes per call yet).
FIXED = [s for s in load_all_builtin() if not s.variable]


@pytest.mark.parametrize("spec", FIXED, ids=lambda s: s.name)
@pytest.mark.parametrize("ranks", [1, 2, 5, 8])
def test_each_rank_pulls_exactly_its_outputs(spec, ranks):
    inst = instantiate(spec, ranks, 6, 4, ranks - 1 if spec.rooted else 0)
    rng = np.random.default_rng(ranks)
    inputs = [rng.integers(-9, 10, n).astype(np.float64) for n in inst.in_counts]
    redop = "sum" if spec.op == "reduce" else None
    for rank, want in enumerate(inst.reference(inputs, redop)):
        got, written = np.full(inst.out_counts[rank], np.nan), np.zeros(inst.out_counts[rank], dtype=int)
        for count, at, sources in tasks_of(inst, rank):
            parts = [inputs[r][o : o + count] for r, o in sources]
            got[at : at + count] = np.sum(parts, axis=0) if len(parts) > 1 else parts[0]
            written[at : at + count] += 1
        assert (written == 1).all() and np.array_equal(got, want), (spec.name, rank)


@pytest.mark.nvcc
@pytest.mark.timeout(300)
def test_the_kernel_builds_without_spills(tmp_path):
    from purlin_bench.backends.cupy.codegen.atoms import compile_options, source_text
    from purlin_bench.backends.cupy.codegen.compiled import primitives
    from tests.nvcc_build import assert_builds_without_spills

    source = tmp_path / "ipc.cu"
    source.write_text(primitives(source_text()) + _KERNEL.replace("MAX_SRC", str(MAX_SRC)))
    for dtype in ("float32", "bfloat16"):
        options = [*compile_options(dtype, "sum", 2, 512, True, False)]
        assert_builds_without_spills(source, options, "sm_90", f"ipc baseline {dtype}", tmp_path / "ipc.o")
