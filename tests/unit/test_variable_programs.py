"""Programs with variable sizes (issue 31): one program per capacity serves
every call's counts. The validator proves it for every count vector (and,
independently here, each program concretized for one call's counts is
proved against that call's own fixed-size instance); mutations that make it
wrong at some counts only are rejected, and the executor shows their damage."""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

import numpy as np
import pytest

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.measure.compare import compare
from purlin_bench.base.errors import CountsError, ProgramError, SpecError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Consume, Program, Ref, Stage, Step, StepId
from purlin_bench.program.render import render_rich, rows, summary_lines
from purlin_bench.program.validate import ProgramInvalid, validate
from purlin_bench.program.variable import check_counts, concretize, resolve
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, at_counts, draw_counts
from purlin_bench.strategies import STRATEGIES

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")
PARAMS = ({}, {"slice_bytes": 64, "channels": 2})


def build(name: str, strategy: str, ranks: int = 4, cap: int = 40, **params):
    inst = instantiate(load_builtin(name), ranks, cap, 4)
    return inst, derive_program(inst, strategy, "float32", params=params)


def special_counts(inst, rng) -> list[tuple[int, ...]]:
    """Zeros everywhere, every chunk full, one rank taking everything, and one draw of each distribution."""
    k, cap = len(inst.count_keys), inst.count
    return [(0,) * k, (cap,) * k, *(draw_counts(inst, d, rng) for d in DISTRIBUTIONS)]


@pytest.mark.parametrize("ranks", range(1, 10))
@pytest.mark.parametrize("name", VARIABLE)
def test_every_program_is_proved_symbolically_and_at_each_calls_counts(name, ranks):
    rng = np.random.default_rng(ranks)
    for strategy in STRATEGIES:
        for params in PARAMS:
            inst, program = build(name, strategy, ranks, 37, **params)  # derive_program() validated it for every count
            assert program.variable and program.schema == 2 and len(program.count_caps) == len(inst.count_keys)
            for counts in special_counts(inst, rng):
                # Independently: the call's fixed program, against the call's own instance.
                validate(concretize(program, counts), at_counts(inst, counts))


def test_one_program_serves_calls_of_any_counts():
    inst, program = build("all-to-all-v", "ring", 5, 23)
    assert (
        derive_program(instantiate(load_builtin("all-to-all-v"), 5, 23, 4), "ring", "float32") is program
    )  # cached, count-free
    shapes = {
        resolve(r, (0,) * 25, program.count_caps).count
        for _, s in program.steps()
        if isinstance(s, Consume)
        for r in s.srcs
    }
    assert shapes == {0}  # at zero counts every slice is empty


def _with(program: Program, sid: StepId, step: Step) -> Program:
    lists = [[list(steps) for steps in chans] for chans in program.lists]
    lists[sid.rank][sid.channel][sid.index] = step
    return dataclasses.replace(program, lists=tuple(tuple(tuple(s) for s in chans) for chans in lists))


def _first(program: Program, pred: Callable[[StepId, Step], bool]) -> tuple[StepId, Step]:
    return next((sid, s) for sid, s in program.steps() if pred(sid, s))


def _refs(step: Step) -> list[Ref]:
    return [step.src, *step.dsts] if isinstance(step, Stage) else [*step.srcs, *step.dsts]


def _damage(inst, program, counts) -> int:
    runner = NumpyRunner(program, seed=1)
    x = [np.arange(n, dtype=np.float32) + 1000 * r for r, n in enumerate(program.in_counts)]
    runner.load(x, 0, counts=counts)
    runner.run(0)
    return compare(inst, program, x, runner.outputs(0), counts).wrong


def test_a_slice_placed_after_the_wrong_chunks_is_rejected_and_wrong_at_some_counts():
    inst, program = build("all-gather-v", "direct", 3, 10)
    # Rank 2 pulls rank 1's chunk: its out slice is after chunk 0. Say it is after nothing.
    sid, step = _first(program, lambda sid, s: isinstance(s, Consume) and s.srcs and s.dsts[0].base == (0,))
    moved = dataclasses.replace(step.dsts[0], base=(), offset=step.dsts[0].offset - 10)
    bad = _with(program, sid, Consume(step.waits, step.op, step.srcs, (moved,)))
    with pytest.raises(ProgramInvalid, match="is not where count 1's chunk sits"):
        validate(bad, inst)
    assert _damage(inst, program, (4, 6, 2)) == 0 and _damage(inst, bad, (4, 6, 2)) > 0


def test_a_value_moved_between_slices_clipped_differently_is_rejected():
    # all-to-all-v's ring carries chunk (0 -> 3) through rank 1's and rank 2's scratch.
    inst, program = build("all-to-all-v", "ring", 4, 16)
    k03, k01 = 3, 1  # c(0, 3) and c(0, 1) in the counts vector
    sid, step = _first(
        program,
        lambda sid, s: (
            sid.rank == 1
            and isinstance(s, Consume)
            and s.srcs
            and s.srcs[0].buf == "scratch"
            and s.dsts[0].buf == "scratch"
            and s.srcs[0].var == k03
        ),
    )
    clipped = (
        tuple(dataclasses.replace(r, var=k01) for r in step.srcs),
        tuple(dataclasses.replace(r, var=k01) for r in step.dsts),
    )
    bad = _with(program, sid, Consume(step.waits, step.op, *clipped))  # consistent in itself, and right at capacity
    clipped_alike = r"holds count 3's chunk .* \(a value must move between slices clipped alike\)"
    with pytest.raises(ProgramInvalid, match=clipped_alike):
        validate(bad, inst)
    counts = [16] * 16
    counts[k01] = 0  # the hop moves nothing, so rank 3 never gets chunk (0 -> 3)
    assert _damage(inst, bad, tuple(counts)) > 0 and _damage(inst, program, tuple(counts)) == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: dataclasses.replace(r, at=r.at + 1), "is not where count 0's chunk sits"),
        (
            lambda r: dataclasses.replace(r, at=r.at + 1, offset=r.offset + 1),
            "clipped by different per-call counts or windows",
        ),
        (lambda r: dataclasses.replace(r, count=r.count + 1), "differ in size"),
        (lambda r: dataclasses.replace(r, var=None, base=()), "moves a fixed number of elements"),
        (lambda r: dataclasses.replace(r, var=99), "names a count the program does not have"),
        (lambda r: dataclasses.replace(r, base=(r.var,)), "counts a chunk twice"),
    ],
)
def test_one_slice_of_a_step_edited_is_rejected(edit, message):
    inst, program = build("reduce-scatter-v", "two-shot", 3, 32)
    sid, step = _first(program, lambda sid, s: isinstance(s, Consume) and len(s.srcs) > 1)
    bad = _with(program, sid, Consume(step.waits, step.op, (edit(step.srcs[0]), *step.srcs[1:]), step.dsts))
    with pytest.raises(ProgramInvalid, match=message):
        validate(bad, inst)


def test_windows_past_the_capacity_and_scratch_after_chunks_are_rejected():
    inst, program = build("reduce-scatter-v", "push", 3, 32)
    sid, step = _first(program, lambda sid, s: isinstance(s, Stage) and s.dsts and s.dsts[0].buf == "scratch")
    wide = [dataclasses.replace(r, at=r.at + 32) for r in _refs(step)]
    with pytest.raises(ProgramInvalid, match="lies outside count"):
        validate(_with(program, sid, Stage(wide[0], tuple(wide[1:]))), inst)
    after = dataclasses.replace(step.dsts[0], base=(0,), offset=step.dsts[0].offset + 32)
    with pytest.raises(ProgramInvalid, match="scratch slots sit at fixed offsets"):
        validate(_with(program, sid, Stage(step.src, (after,))), inst)


def test_symbolic_slices_in_a_fixed_program_and_in_place_variable_programs_are_rejected():
    inst = instantiate(load_builtin("all-gather"), 3, 8, 4)
    program = derive_program(inst, "direct", "float32")
    sid, step = _first(program, lambda sid, s: isinstance(s, Consume) and s.srcs)
    bad = _with(program, sid, Consume(step.waits, step.op, (dataclasses.replace(step.srcs[0], var=0),), step.dsts))
    with pytest.raises(ProgramInvalid, match="in a fixed-size program"):
        validate(bad, inst)
    vinst, vprogram = build("all-gather-v", "direct", 3, 8)
    with pytest.raises(ProgramInvalid, match="no in-place form"):
        validate(dataclasses.replace(vprogram, inplace=True, inplace_offsets=(0, 8, 16)), vinst)
    with pytest.raises(SpecError, match="no in-place form"):
        derive_program(vinst, "direct", "float32", inplace=True)


def test_a_variable_program_round_trips_as_schema_2_and_a_fixed_one_is_unchanged():
    _, program = build("all-to-all-v", "push", 3, 12)
    data = json.loads(program.to_json())
    assert data["schema"] == 2 and data["count_caps"] == [12] * 9 and data["count_names"][1] == "c(0, 1)"
    assert Program.from_dict(data) == program
    fixed = derive_program(instantiate(load_builtin("all-to-all"), 3, 12, 4), "push", "float32").to_dict()
    assert fixed["schema"] == 1 and "count_caps" not in fixed
    assert all(len(ref) == 4 for ch in fixed["lists"] for steps in ch for s in steps for ref in s.get("dsts", []))
    with pytest.raises(ProgramError, match="newer than this purlin-bench understands"):
        Program.from_dict({**data, "schema": 4})


def test_counts_are_checked_against_the_program_before_anything_runs():
    inst, program = build("all-gather-v", "ring", 3, 5)
    runner = NumpyRunner(program)
    x = [np.zeros(n, np.float32) for n in program.in_counts]
    for counts, message in (
        ((1, 2), "2 counts given, expected 3"),
        (None, "takes per-call counts"),
        ((1, 2, 6), r"count 2 \(c\(2\)\) is 6, outside 0..5"),
    ):
        with pytest.raises(CountsError, match=message):
            runner.load(x, 0, counts=counts)
    with pytest.raises(CountsError, match="fixed sizes"):
        check_counts(derive_program(instantiate(load_builtin("all-gather"), 3, 5, 4), "ring", "float32"), (1, 2, 3))


def test_show_prints_slices_as_expressions_of_the_counts():
    _, program = build("all-to-all-v", "push", 3, 100)
    text = " ".join(" ".join(r.cells()) for r in rows(program, 1, 0))
    assert "in[n3+n4:+n5[0:100])" in text and "r2.out[n2:+n5[0:100])" in text
    assert any("n1 = c(0, 1)" in line for line in summary_lines(program))
    assert render_rich(program) is not None


@pytest.mark.parametrize("name", ("reduce-scatter-v", "all-gather-v"))
def test_two_shot_starts_each_flows_parts_at_its_own_owner_for_variable_sizes(name):
    """A call fills a flow from its first part on: owner 0 taking every flow's
    first part did most of the work. Flow i's first part is owner i's; a rank
    owns one part of every flow; fixed sizes keep parts in rank order."""
    ranks = 4
    for variable, spec in ((True, load_builtin(name)), (False, load_builtin(name.removesuffix("-v")))):
        inst = instantiate(spec, ranks, 64, 4)
        program = derive_program(inst, "two-shot", "float32", "sum" if inst.op == "reduce" else None)
        owner: dict[tuple[int, int], int] = {}  # (flow, element at capacity) -> the rank that moves it
        for rank in range(ranks):
            for steps in program.lists[rank]:
                for step in steps:
                    if isinstance(step, Consume) and step.op != "wait":
                        ref = step.dsts[0]
                        flow = ref.var if variable else next(i for i, f in enumerate(inst.flows)
                                                              if any(p.rank == ref.rank for p in f.consumers)
                                                              and f.consumers[0].offset <= ref.offset
                                                              < f.consumers[0].offset + f.count)
                        owner[(flow, ref.at if variable else ref.offset - inst.flows[flow].consumers[0].offset)] = rank
        firsts = [owner[(f, 0)] for f in range(len(inst.flows))]
        assert firsts == (list(range(ranks)) if variable else [0] * len(inst.flows))
        for f in range(len(inst.flows)):
            assert sorted(r for (g, _), r in owner.items() if g == f) == list(range(ranks))
