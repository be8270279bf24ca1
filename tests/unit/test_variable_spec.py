"""Variable sizes in the semantics layer (issue 31): ``count: variable`` in
the YAML language, the counts vector's order, a call's layout and reference
(all-gather-v, reduce-scatter-v, all-to-all-v against hand-written NumPy),
the distributions a check draws from, and every way counts can be wrong,
each one line before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from purlin_bench.base.errors import CountsError, PurlinError, SpecError
from purlin_bench.spec import instantiate, key_text, load_builtin
from purlin_bench.spec.loader import parse_spec
from purlin_bench.spec.variable import DISTRIBUTIONS, at_counts, check_counts, draw_counts, expected_outputs, total

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")


@pytest.mark.parametrize("name", VARIABLE)
def test_each_variable_builtin_loads(name):
    spec = load_builtin(name)
    assert spec.variable and spec.count_mode == "variable" and not spec.rooted
    assert spec.description and spec.bench.size_elements.text in ("total", "total / R")


def test_counts_are_per_source_per_destination_and_per_pair_in_index_order():
    names = lambda name, R: [key_text(k) for k in instantiate(load_builtin(name), R, 5, 4).count_keys]  # noqa: E731
    assert names("all-gather-v", 3) == ["c(0)", "c(1)", "c(2)"]  # c(i): what rank i contributes
    assert names("reduce-scatter-v", 3) == ["c(0)", "c(1)", "c(2)"]  # c(i): what rank i receives
    # c(i, j): what rank i sends rank j, row-major (the numbers' order, not the text's: c(0, 10) after c(0, 9))
    assert names("all-to-all-v", 2) == ["c(0, 0)", "c(0, 1)", "c(1, 0)", "c(1, 1)"]
    keys = instantiate(load_builtin("all-to-all-v"), 11, 1, 4).count_keys
    assert keys[:11] == tuple(("c", 0, j) for j in range(11))


def test_the_instance_is_laid_out_at_capacity_and_names_what_moves():
    inst = instantiate(load_builtin("all-to-all-v"), 3, 100, 4)
    assert inst.variable and inst.in_counts == (300,) * 3 and inst.out_counts == (300,) * 3
    index = {k: i for i, k in enumerate(inst.count_keys)}
    for rank, layout in enumerate(inst.outputs):
        for pos, (key, place) in enumerate(layout):
            assert place.var == index[key] and place.offset == 100 * pos
            assert place.base == tuple(index[k] for k, _ in layout[:pos])  # the chunks before it
    # No coalescing of neighbours: each chunk is a flow, as sizes differ per call.
    assert len(inst.flows) == 9
    assert inst.inplace_refusal() and "per-call offset" in inst.inplace_refusal()


def test_a_call_is_packed_and_its_reference_is_the_collective():
    rng = np.random.default_rng(0)
    R, cap = 4, 9
    inst = instantiate(load_builtin("all-to-all-v"), R, cap, 4)
    counts = [0, 3, 9, 1, 2, 0, 0, 5, 9, 9, 9, 9, 0, 0, 0, 0]  # zeros, full, a silent rank
    n = np.array(counts).reshape(R, R)
    x = [rng.integers(-50, 50, size=cap * R).astype(np.float32) for _ in range(R)]
    out = expected_outputs(inst, x, None, counts)
    for r in range(R):
        sent = [x[j][n[j, :r].sum() : n[j, :r].sum() + n[j, r]] for j in range(R)]  # rank j's chunk for r
        assert np.array_equal(out[r], np.concatenate(sent))
    call = at_counts(inst, counts)
    assert call.in_counts == tuple(int(v) for v in n.sum(axis=1))
    assert call.out_counts == tuple(int(v) for v in n.sum(axis=0))
    assert total(inst, counts) == sum(counts)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(0, 40), st.sampled_from(DISTRIBUTIONS), st.integers(0, 2**32 - 1))
def test_all_gather_v_and_reduce_scatter_v_reference(ranks, cap, dist, seed):
    rng = np.random.default_rng(seed)
    gather = instantiate(load_builtin("all-gather-v"), ranks, cap, 4)
    counts = draw_counts(gather, dist, rng)
    x = [rng.integers(-50, 50, size=n).astype(np.float64) for n in gather.in_counts]
    for out in expected_outputs(gather, x, None, counts):
        assert np.array_equal(out, np.concatenate([x[i][: counts[i]] for i in range(ranks)]))
    scatter = instantiate(load_builtin("reduce-scatter-v"), ranks, cap, 4)
    counts = draw_counts(scatter, dist, rng)
    x = [rng.integers(-50, 50, size=n).astype(np.float64) for n in scatter.in_counts]
    starts = np.concatenate([[0], np.cumsum(counts)])
    whole = np.sum([v[: starts[-1]] for v in x], axis=0) if ranks else None
    for r, out in enumerate(expected_outputs(scatter, x, "sum", counts)):
        assert np.array_equal(out, whole[starts[r] : starts[r + 1]])


@pytest.mark.parametrize("name", VARIABLE)
def test_distributions_stay_in_range_and_hot_is_one_rank(name):
    inst = instantiate(load_builtin(name), 5, 17, 4)
    rng = np.random.default_rng(1)
    for dist in DISTRIBUTIONS:
        for _ in range(20):
            counts = draw_counts(inst, dist, rng)
            assert len(counts) == len(inst.count_keys) and all(0 <= c <= 17 for c in counts)
    hot = draw_counts(inst, "hot", rng)
    ranks = {k[-1] for k, c in zip(inst.count_keys, hot) if c}
    assert len(ranks) == 1 and set(hot) == {0, 17}  # one rank takes everything
    drawn = [c for _ in range(20) for c in draw_counts(inst, "sparse", rng)]
    assert 0.3 < drawn.count(0) / len(drawn) < 0.7
    with pytest.raises(CountsError, match="unknown counts distribution 'zipf'"):
        draw_counts(inst, "zipf", rng)


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ([1, 2], r"takes 3 counts \(one per chunk: c\(0\), c\(1\), c\(2\)\), got 2"),
        ([1, 2, 11], r"the count of c\(2\) is 11, outside 0..10"),
        ([1, -1, 0], r"the count of c\(1\) is -1, outside 0..10"),
        ([1, 2.5, 0], r"the count of c\(1\) is 2.5, not a whole number"),
        ([True, 1, 0], r"the count of c\(0\) is True, not a whole number"),
    ],
)
def test_counts_that_do_not_fit_are_one_line(counts, message):
    inst = instantiate(load_builtin("all-gather-v"), 3, 10, 4)
    with pytest.raises(CountsError, match=message) as info:
        check_counts(inst, counts)
    assert "\n" not in str(info.value) and isinstance(info.value, PurlinError)
    assert check_counts(inst, np.array([0, 10, 3])) == (0, 10, 3)  # numpy integers are whole numbers
    with pytest.raises(CountsError, match="fixed sizes"):
        check_counts(instantiate(load_builtin("all-gather"), 3, 10, 4), [1, 2, 3])


USER_SPEC = """
name: shift-v
description: Rank r receives rank r-1's chunk, of a size given per call.
op: copy
count: variable
bench: {size: total, busbw: 1}
input:
  - chunk: c(r)
output:
  - chunk: c((r - 1) % R)
"""


def test_a_users_own_variable_collective():
    import yaml

    spec = parse_spec(yaml.safe_load(USER_SPEC), "shift-v.yaml")
    inst = instantiate(spec, 4, 8, 2)
    counts = (3, 0, 8, 1)
    x = [np.arange(8, dtype=np.float16) + 10 * r for r in range(4)]
    out = expected_outputs(inst, x, None, counts)
    assert [len(o) for o in out] == [1, 3, 0, 8]
    assert np.array_equal(out[1], x[0][:3]) and np.array_equal(out[3], x[2])


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"count": "sometimes"}, "count: expected one of buffer, chunk, variable, got 'sometimes'"),
        ({"bench": {"size": "total * k"}}, "bench.size: unknown name 'k'"),
        ({"input": [{"chunk": "c(r)"}, {"chunk": "c(r)"}]}, "lists c(0) twice"),
    ],
)
def test_variable_spec_errors_name_the_file_and_field(patch, message):
    import yaml

    raw = {**yaml.safe_load(USER_SPEC), **patch}
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        parse_spec(raw, "shift-v.yaml")
    assert str(info.value).startswith("shift-v.yaml: ") and "\n" not in str(info.value)


def test_total_is_only_a_name_of_variable_specs():
    import yaml

    raw = {**yaml.safe_load(USER_SPEC), "count": "chunk", "bench": {"size": "total"}}
    with pytest.raises(SpecError, match="bench.size: unknown name 'total'"):
        parse_spec(raw, "shift.yaml")


def test_bench_and_tune_sizing_refuse_in_one_line():
    spec = load_builtin("all-to-all-v")
    for call in (lambda: spec.count_for_bytes(4, 1 << 20, 4), lambda: spec.bytes_for_count(4, 10, 4)):
        with pytest.raises(SpecError, match="not supported yet"):
            call()
