"""The torch baseline's code, derived from the dataflow without torch or a
GPU: the index map computes the reference, and the layouts that allow it
take a strided view (one kernel; two for a reduction sent to every rank)."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.cupy.torch_baseline import affine, index_map, plan_for
from purlin_bench.inputs import exact_inputs
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin


@pytest.mark.parametrize("spec", load_all_builtin(), ids=lambda s: s.name)
@pytest.mark.parametrize("ranks", [1, 2, 3, 8])
def test_the_index_map_computes_the_reference(spec, ranks):
    inst = instantiate(spec, ranks, 7, 4, ranks - 1 if spec.rooted else 0)
    inputs = exact_inputs(inst.in_counts, np.dtype(np.float32), "sum", seed=ranks)
    idx, sources = index_map(inst)
    flat = np.concatenate(inputs)
    got = flat[idx].sum(0) if inst.op == "reduce" else flat[idx[0]]
    want = np.concatenate(inst.reference(inputs, "sum"))
    assert np.array_equal(got.astype(np.float32), want)
    kernels, plan = plan_for(inst, idx, sources)
    if plan[0] in ("view", "reduce-view", "reduce-expand"):
        shape, strides, base = plan[1], plan[2], plan[3]
        view = np.lib.stride_tricks.as_strided(flat[base:], shape, [s * 4 for s in strides])
        if plan[0] == "view":
            assert np.array_equal(view.reshape(-1), want)
        elif plan[0] == "reduce-view":
            assert np.array_equal(view.sum(0).reshape(-1), want)
        else:
            full, axis = plan[4], plan[5]
            assert np.array_equal(np.broadcast_to(np.expand_dims(view.sum(0), axis), full).reshape(-1), want)


@pytest.mark.parametrize(("name", "kernels", "kind"), [
    ("all-gather", 1, "view"), ("broadcast", 1, "view"), ("all-to-all", 1, "view"), ("gather", 1, "view"), ("scatter", 1, "view"),
    ("reduce-scatter", 1, "reduce-view"), ("reduce", 1, "reduce-view"), ("all-reduce", 2, "reduce-expand"),
])
def test_every_builtin_takes_the_fewest_kernels_its_layout_allows(name, kernels, kind):
    for ranks in (2, 8):
        spec = load_builtin(name)
        inst = instantiate(spec, ranks, 1000, 4, 1 if spec.rooted else 0)
        idx, sources = index_map(inst)
        assert plan_for(inst, idx, sources)[:1] == (kernels,) and plan_for(inst, idx, sources)[1][0] == kind


def test_affine_finds_zero_strides_and_refuses_a_permutation():
    assert affine(np.tile(np.arange(4), 3), (3, 4)) == (0, (0, 1))
    assert affine(np.array([1, 0, 3, 2]), (4,)) is None
    assert affine(np.array([3, 2, 1, 0]), (4,)) is None  # descending: as_strided has no negative strides
