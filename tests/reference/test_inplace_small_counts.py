"""In place at the counts where a rank's input and output hold the same number
of elements (count 0, count 1 of a buffer-mode split): nesting is decided by
the layout, so these run in place and check correct (issue 15)."""

from __future__ import annotations

import textwrap

import pytest

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.measure.compare import check_program
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_all_builtin, load_spec_file
from purlin_bench.strategies import STRATEGIES

SPECS = [s for s in load_all_builtin() if not s.variable]  # sizes per call have no in-place form
RANKS = range(1, 10)
COUNTS = (0, 1, 7)

# reduce-scatter with its count split over the input (count: buffer): at count
# 1 over 9 ranks rank 0's input and output both hold 1 element.
BUFFER_RS = textwrap.dedent(
    """
    name: rs-buffer
    op: reduce
    count: buffer
    input:
      - chunk: c(i)
        for: i in range(R)
    output:
      - chunk: c(r)
    """
)


@pytest.fixture(scope="module")
def buffer_rs(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "rs-buffer.yaml"
    path.write_text(BUFFER_RS)
    return load_spec_file(path)


def _assert_nests(inst):
    """Every chunk of each rank's smaller buffer sits, at the in-place offset,
    exactly where the larger buffer holds the chunk of that name."""
    offsets = inst.inplace_offsets()
    for rank in range(inst.ranks):
        ins, outs = inst.inputs[rank], inst.outputs[rank]
        # The program model's rule: the output is the larger buffer on a tie.
        small, large = (ins, outs) if inst.out_counts[rank] >= inst.in_counts[rank] else (outs, ins)
        at = {}
        for key, place in large:
            at.setdefault(key, place)
        for key, place in small:
            if place.count:
                assert key in at, (rank, key)
                assert at[key].offset == place.offset + offsets[rank], (rank, key)
        assert offsets[rank] + sum(p.count for _, p in small) <= sum(p.count for _, p in large)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
@pytest.mark.parametrize("ranks", RANKS)
def test_inplace_is_refused_only_where_the_layout_does_not_nest(spec, ranks):
    for count in COUNTS:
        for itemsize in (2, 4, 8):
            for root in range(ranks) if spec.rooted else (0,):
                inst = instantiate(spec, ranks, count, itemsize, root)
                why = inst.inplace_refusal()
                if spec.name == "all-to-all" and ranks > 1:
                    assert why and "do not nest" in why
                    continue
                assert why is None, (count, itemsize, root, why)
                _assert_nests(inst)


def test_the_reported_cases_nest(buffer_rs):
    rs2 = instantiate(next(s for s in SPECS if s.name == "reduce-scatter"), 2, 0, 4)
    assert rs2.in_counts == rs2.out_counts == (0, 0)
    assert rs2.inplace_refusal() is None
    rs9 = instantiate(buffer_rs, 9, 1, 4)
    assert rs9.in_counts[0] == rs9.out_counts[0] == 1
    assert rs9.inplace_refusal() is None
    assert rs9.inplace_offsets() == (0,) + (1,) * 8  # chunk r sits after c(0), the one element
    _assert_nests(rs9)


def _check_inplace(inst):
    for strategy in STRATEGIES:
        program = derive_program(inst, strategy, "float32", None, inplace=True)
        result = check_program(inst, program, NumpyRunner(program, seed=inst.ranks), seed=inst.count)
        assert result.ok, (inst.spec.name, inst.ranks, inst.count, strategy, result)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_inplace_checks_correct_at_small_counts(spec):
    for ranks in RANKS:
        if spec.name == "all-to-all" and ranks > 1:
            continue
        for count in COUNTS:
            _check_inplace(instantiate(spec, ranks, count, 4, ranks - 1 if spec.rooted else 0))


def test_buffer_mode_reduce_scatter_checks_correct_in_place(buffer_rs):
    for ranks in RANKS:
        for count in COUNTS:
            _check_inplace(instantiate(buffer_rs, ranks, count, 4))
