"""The torch baseline's code, derived from the dataflow without torch or a
GPU: the index map computes the reference, and the layouts that allow it
take a strided view (one kernel; two for a reduction sent to every rank)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from purlin_bench.backends.cupy.baselines.torch_code import IndexMap, affine, index_map, plan_for
from purlin_bench.base.errors import PurlinError
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.spec.loader import load_spec_file

# The built-ins of fixed sizes (no baseline of sizes per call yet).
FIXED = [s for s in load_all_builtin() if not s.variable]


def of_array(idx: np.ndarray) -> IndexMap:
    """An IndexMap of a dense (sources, total) map: a run per element."""
    idx = np.atleast_2d(idx)
    e = np.arange(idx.shape[1], dtype=np.int64)
    return IndexMap(
        idx.shape[0], idx.shape[1], tuple(np.stack([e, row.astype(np.int64), np.ones_like(e)], axis=1) for row in idx)
    )


def dense_affine(idx: np.ndarray, shape: tuple[int, ...]):
    """The affine test done element by element (what the runs must agree with)."""
    grid = idx.reshape(shape)
    base = int(grid.flat[0])
    strides = [
        0 if n == 1 else int(grid[tuple(1 if k == a else 0 for k in range(len(shape)))]) - base
        for a, n in enumerate(shape)
    ]
    if any(st < 0 for st in strides):
        return None
    expect = base + sum(
        np.arange(n).reshape([-1 if k == a else 1 for k in range(len(shape))]) * st
        for a, (n, st) in enumerate(zip(shape, strides))
    )
    return (base, tuple(strides)) if np.array_equal(grid, expect) else None


@pytest.mark.parametrize("spec", FIXED, ids=lambda s: s.name)
@pytest.mark.parametrize("ranks", [1, 2, 3, 8])
def test_the_index_map_computes_the_reference(spec, ranks):
    inst = instantiate(spec, ranks, 7, 4, ranks - 1 if spec.rooted else 0)
    inputs = exact_inputs(inst.in_counts, np.dtype(np.float32), "sum", seed=ranks)
    imap = index_map(inst)
    idx = imap.dense()
    flat = np.concatenate(inputs)
    got = flat[idx].sum(0) if inst.op == "reduce" else flat[idx[0]]
    want = np.concatenate(inst.reference(inputs, "sum"))
    assert np.array_equal(got.astype(np.float32), want)
    kernels, plan = plan_for(inst, imap)
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


@pytest.mark.parametrize(
    ("name", "kernels", "kind"),
    [
        ("all-gather", 1, "view"),
        ("broadcast", 1, "view"),
        ("all-to-all", 1, "view"),
        ("gather", 1, "view"),
        ("scatter", 1, "view"),
        ("reduce-scatter", 1, "reduce-view"),
        ("reduce", 1, "reduce-view"),
        ("all-reduce", 2, "reduce-expand"),
    ],
)
def test_every_builtin_takes_the_fewest_kernels_its_layout_allows(name, kernels, kind):
    for ranks in (2, 8):
        spec = load_builtin(name)
        inst = instantiate(spec, ranks, 1000, 4, 1 if spec.rooted else 0)
        found = plan_for(inst, index_map(inst))
        assert found[:1] == (kernels,) and found[1][0] == kind


def test_affine_finds_zero_strides_and_refuses_a_permutation():
    assert affine(of_array(np.tile(np.arange(4), 3)), (3, 4)) == (0, (0, 1))
    assert affine(of_array(np.array([1, 0, 3, 2])), (4,)) is None
    assert affine(of_array(np.array([3, 2, 1, 0])), (4,)) is None  # descending: as_strided has no negative strides
    assert affine(of_array(np.array([0, 2, 4, 6])), (4,)) == (0, (2,))
    assert affine(of_array(np.array([0, 2, 4, 7])), (4,)) is None


SPECS = [*FIXED, load_spec_file(Path(__file__).resolve().parents[2] / "examples" / "ring-shift.yaml")]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize(("ranks", "count"), [(1, 5), (2, 1), (3, 7), (8, 1), (8, 12), (4, 64)])
def test_the_runs_answer_as_the_dense_map_does(spec, ranks, count):
    """Every view shape of every spec: the run-by-run affine test gives the
    element-by-element one's answer, over the sources and over source 0."""
    inst = instantiate(spec, ranks, count, 4, ranks - 1 if spec.rooted else 0)
    imap = index_map(inst)
    idx = imap.dense()
    shapes = [(imap.total,)] + [(d, imap.total // d) for d in range(2, imap.total + 1) if imap.total % d == 0][:6]
    shapes += [(ranks, ranks, imap.total // ranks**2)] if imap.total % ranks**2 == 0 else []
    for shape in shapes:
        assert affine(imap, shape) == dense_affine(idx[0], shape), shape
        assert affine(imap, (imap.sources, *shape), over_sources=True) == dense_affine(idx, (imap.sources, *shape)), (
            shape
        )


def test_a_256_mib_bfloat16_all_reduce_plans_without_a_dense_map():
    """8 ranks x 128 Mi elements: a dense map would take 64 GiB (a bench of
    it was killed for memory on a 128 GiB host); the runs take kilobytes,
    and an index tensor that large is refused with its size."""
    import tracemalloc

    inst = instantiate(load_builtin("all-reduce"), 8, 128 << 20, 2, 0)
    tracemalloc.start()
    kernels, plan = plan_for(inst, index_map(inst))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (kernels, plan[0]) == (2, "reduce-expand") and peak < 16 << 20, peak
    with pytest.raises(PurlinError, match="GiB"):
        index_map(inst).dense()


def run(*rows) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def test_an_index_map_refuses_runs_that_do_not_tile_its_outputs():
    assert IndexMap(1, 4, (run((0, 5, 2), (2, 0, 2)),)).values(0, np.arange(4)).tolist() == [5, 6, 0, 1]
    for bad in (
        run((0, 0, 2), (2, 9, 0), (2, 2, 2)),
        run((0, 0, 2), (3, 0, 1)),
        run((0, 0, 2), (1, 0, 3)),
        run((0, 0, 3)),
    ):
        with pytest.raises(ValueError, match="tile"):
            IndexMap(1, 4, (bad,))
