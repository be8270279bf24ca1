"""Break valid programs on purpose. Each mutation must be rejected by the
validator, and the NumPy executor, run on the mutated program without the
validator, must show the damage: a deadlock naming the blocked step, or
outputs that the check counts as wrong.

Races (a read that may precede the write it needs) are shown with an
adversarial but legal interleaving: the executor's scheduler normally picks a
random runnable step; :class:`LastRunnable` always picks the highest-ranked
one, so the consumer under attack runs as early as the flags allow. Each such
test first runs the unmutated program under the same schedule as a control.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np
import pytest

from purlin_bench.backends.port import run_once
from purlin_bench.measure.compare import check_program, compare
from purlin_bench.base.dtypes import random_inputs
from purlin_bench.base.errors import DeadlockError
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Ref, Stage, Step, StepId
from purlin_bench.program.validate import ProgramInvalid, validate
from purlin_bench.spec import Instance, instantiate, load_builtin


class LastRunnable:
    """Stands in for the runner's RNG: always run the last runnable step."""

    def integers(self, n: int) -> int:
        return n - 1


def build(
    name: str, strategy: str, ranks: int = 3, count: int = 40, root: int = 0, **params
) -> tuple[Instance, Program]:
    inst = instantiate(load_builtin(name), ranks, count, 4, root)
    return inst, derive_program(inst, strategy, "float32", params=params)


def mutate(program: Program, rank: int, edit: Callable[[list[Step]], None], channel: int = 0) -> Program:
    """A copy of ``program`` with ``edit`` applied to one step list."""
    lists = [[list(steps) for steps in chans] for chans in program.lists]
    edit(lists[rank][channel])
    return dataclasses.replace(program, lists=tuple(tuple(tuple(s) for s in chans) for chans in lists))


def find(steps: list[Step], pred: Callable[[Step], bool], nth: int = 0) -> int:
    return [i for i, s in enumerate(steps) if pred(s)][nth]


def is_push(step: Step) -> bool:
    return isinstance(step, Stage) and bool(step.dsts)


def is_data_notify(step: Step) -> bool:
    return isinstance(step, Notify) and step.role == "data"


def wrong_count(inst: Instance, program: Program, adversarial: bool = False, calls: int = 2) -> int:
    runner = NumpyRunner(program, seed=0)
    if adversarial:
        runner.rng = LastRunnable()
    return check_program(inst, program, runner, seed=0, calls=calls).wrong


def waiter_of(program: Program, flag: FlagRef) -> StepId:
    return next(sid for sid, s in program.steps() if isinstance(s, Consume) and flag in s.waits)


# -- deadlocks ------------------------------------------------------------------

DROP_NOTIFY_CASES = [
    ("all-reduce", "push"),
    ("all-gather", "ring"),
    ("reduce-scatter", "two-shot"),
    ("broadcast", "direct"),
    ("scatter", "push"),
    ("gather", "ring"),
]


@pytest.mark.parametrize(("name", "strategy"), DROP_NOTIFY_CASES)
def test_drop_a_notify_deadlocks(name, strategy):
    inst, program = build(name, strategy, ranks=4, root=1)
    rank = next(r for r in range(4) if any(isinstance(s, Notify) for s in program.lists[r][0]))
    index = find(list(program.lists[rank][0]), lambda s: isinstance(s, Notify))
    dropped = program.lists[rank][0][index].flag
    broken = mutate(program, rank, lambda steps: steps.pop(index))

    with pytest.raises(ProgramInvalid, match=re.escape(f"{dropped.text()} is waited on but never notified")):
        validate(broken, inst)
    blocked = waiter_of(broken, dropped)
    with pytest.raises(DeadlockError) as info:
        wrong_count(inst, broken)
    assert f"{blocked.text()} waits on {dropped.text()}" in str(info.value)


def test_a_wait_cycle_deadlocks_and_the_validator_says_so():
    # Every rank of a ring sends its first slice only after it has received one:
    # each waits on its upstream neighbour, around the whole ring.
    inst, program = build("all-gather", "ring")
    who = {s.flag: sid for sid, s in program.steps() if isinstance(s, Notify)}

    def waits_for_data(step: Step) -> bool:
        return isinstance(step, Consume) and any(
            program.lists[who[f].rank][who[f].channel][who[f].index].role == "data" for f in step.waits
        )

    broken, blocked = program, []
    for rank in range(3):
        steps = list(program.lists[rank][0])
        send, receive = find(steps, is_data_notify), find(steps, waits_for_data)
        assert send < receive

        def move(steps: list[Step], send: int = send, receive: int = receive) -> None:
            steps.insert(receive, steps.pop(send))

        broken = mutate(broken, rank, move)
        blocked.append(
            f"rank {rank} channel 0 step {receive - 1} waits on r{rank}.flag"
        )  # the receive, moved up by one
    with pytest.raises(ProgramInvalid, match=f"deadlocks: {re.escape(blocked[0])}"):
        validate(broken, inst)
    with pytest.raises(DeadlockError) as info:
        wrong_count(inst, broken)
    assert all(b in str(info.value) for b in blocked)


# -- wrong data -------------------------------------------------------------------

DROP_STAGE_CASES = [
    ("all-reduce", "push"),
    ("all-reduce", "ring"),
    ("all-gather", "push"),
    ("reduce", "ring"),
    ("broadcast", "push"),
    ("all-to-all", "ring"),
]


@pytest.mark.parametrize(("name", "strategy"), DROP_STAGE_CASES)
def test_drop_a_stage_gives_wrong_data(name, strategy):
    inst, program = build(name, strategy, ranks=3)
    rank = next(r for r in range(3) if any(is_push(s) for s in program.lists[r][0]))
    broken = mutate(program, rank, lambda steps: steps.pop(find(steps, is_push)))
    with pytest.raises(ProgramInvalid, match="holds nothing yet|ends holding nothing"):
        validate(broken, inst)
    # Outputs and scratch are poisoned before each call: a missing stage shows.
    assert wrong_count(inst, broken) > 0


def test_consume_pointed_at_the_wrong_slice_of_a_reduction():
    inst, program = build("all-reduce", "direct", ranks=2, count=64, slice_bytes=64)

    def shift(steps: list[Step]) -> None:
        i = find(steps, lambda s: isinstance(s, Consume) and s.op == "reduce" and s.srcs[0].offset == 16)
        s = steps[i]
        steps[i] = Consume(s.waits, s.op, (s.srcs[0], dataclasses.replace(s.srcs[1], offset=32)), s.dsts)

    broken = mutate(program, 0, shift)
    with pytest.raises(
        ProgramInvalid,
        match=r"rank 0 output c\(0\) at \[16:32\) ends holding in0\[16...\] \+ in1\[32...\]"
        r", expected in0\[16...\] \+ in1\[16...\]",
    ):
        validate(broken, inst)
    assert wrong_count(inst, broken) == 16  # that slice, all of it, and nothing else


def test_consume_pointed_at_the_wrong_rank_of_a_copy():
    inst, program = build("all-gather", "direct", ranks=3, count=8)

    def other_rank(steps: list[Step]) -> None:
        # Rank 0 reads rank 1 before rank 2, so rank 1 is known to be in the call.
        i = find(steps, lambda s: isinstance(s, Consume) and s.op == "copy" and s.srcs[0].rank == 2)
        s = steps[i]
        steps[i] = Consume(s.waits, s.op, (dataclasses.replace(s.srcs[0], rank=1),), s.dsts)

    broken = mutate(program, 0, other_rank)
    with pytest.raises(
        ProgramInvalid, match=r"rank 0 output c\(2\) at \[16:24\) ends holding in1\[0...\], expected in2\[0...\]"
    ):
        validate(broken, inst)
    assert wrong_count(inst, broken, calls=1) == 8


def test_write_scratch_twice():
    # Rank 2's push into rank 1 lands on the slot rank 0 pushes to; the slot
    # rank 1 then reduces from rank 2 was never written.
    inst, program = build("all-reduce", "push")

    def same_slot(steps: list[Step]) -> None:
        i = find(steps, lambda s: is_push(s) and s.dsts[0].rank == 1)
        s = steps[i]
        assert s.dsts[0] != Ref(1, "scratch", 0, 40)
        steps[i] = Stage(s.src, (Ref(1, "scratch", 0, 40),))

    broken = mutate(program, 2, same_slot)
    with pytest.raises(
        ProgramInvalid, match=r"writes r1.scratch\[0:40\] while rank 0 channel 0 step \d+ may still write it"
    ):
        validate(broken, inst)
    assert wrong_count(inst, broken) > 0


def test_an_out_of_place_program_that_writes_an_input():
    # Rank 0 also copies what it gathers from rank 2 over its own input: its
    # outputs stay right, but a caller whose tensor is the input buffer (the
    # Communicator's zero-copy path) would find it changed.
    inst, program = build("all-gather", "direct", ranks=3, count=8)

    def also_into_input(steps: list[Step]) -> None:
        i = find(steps, lambda s: isinstance(s, Consume) and s.op == "copy" and s.srcs[0].rank == 2)
        s = steps[i]
        steps[i] = Consume(s.waits, s.op, s.srcs, (*s.dsts, Ref(0, "in", 0, 8)))

    broken = mutate(program, 0, also_into_input)
    with pytest.raises(ProgramInvalid, match=r"writes r0.in\[0:8\]: an out-of-place program never writes an input"):
        validate(broken, inst)
    runner = NumpyRunner(broken, seed=0)
    inputs = random_inputs(np.random.default_rng(0), inst.in_counts, np.dtype("float32"), None)
    run_once(runner, inputs)
    assert not np.array_equal(runner.buffer(0, "in"), inputs[0])
    control = NumpyRunner(program, seed=0)
    run_once(control, inputs)
    assert all(np.array_equal(control.buffer(r, "in"), inputs[r]) for r in range(3))


def test_drop_a_wait_lets_a_consumer_read_too_early():
    inst, program = build("all-reduce", "push")
    assert wrong_count(inst, program, adversarial=True) == 0  # control

    def drop(steps: list[Step]) -> None:
        i = find(steps, lambda s: isinstance(s, Consume) and s.op == "reduce")
        s = steps[i]
        steps[i] = Consume(s.waits[1:], s.op, s.srcs, s.dsts)

    broken = mutate(program, 2, drop)
    with pytest.raises(ProgramInvalid, match=r"r2.flag\[0\] is notified but nobody waits on it"):
        validate(broken, inst)
    assert wrong_count(inst, broken, adversarial=True) > 0


def test_swap_so_a_read_precedes_the_notify():
    # The producer notifies before it stages: the consumer may read scratch
    # before the data is there.
    inst, program = build("all-reduce", "push")

    def swap(steps: list[Step]) -> None:
        i = find(steps, is_push, nth=1)  # rank 0's push to rank 2
        assert is_data_notify(steps[i + 1])
        steps[i], steps[i + 1] = steps[i + 1], steps[i]

    broken = mutate(program, 0, swap)
    with pytest.raises(
        ProgramInvalid,
        match=r"reads r2.scratch\[0:40\], written by rank 0 channel 0 step \d+ with no notify between them",
    ):
        validate(broken, inst)
    assert wrong_count(inst, broken, adversarial=True) > 0


def test_duplicate_a_notify_breaks_the_next_call():
    # Epoch counters: a flag bumped twice in call 1 already satisfies call 2's
    # wait, so call 2's consumer can run before its producer stages.
    inst, program = build("all-reduce", "push")

    def duplicate(steps: list[Step]) -> None:
        i = find(steps, is_data_notify, nth=1)  # rank 0 -> rank 2
        steps.insert(i, steps[i])

    broken = mutate(program, 0, duplicate)
    with pytest.raises(ProgramInvalid, match=r"r2.flag\[0\] is notified 2 times per call"):
        validate(broken, inst)
    runner = NumpyRunner(broken)
    runner.rng = LastRunnable()
    rng = np.random.default_rng(0)
    wrong = []
    for _ in range(2):
        inputs = random_inputs(rng, broken.in_counts, np.dtype(np.float32), "sum")
        wrong.append(compare(inst, broken, inputs, run_once(runner, inputs)).wrong)
    assert wrong[0] == 0 and wrong[1] > 0
