"""push-parity (strategies/push_parity.py): parity scratch drops the ready/done
flags where a rank only writes a peer's scratch and waits on that peer; the
validator's cross-call rule (program/validate.py) holds it to that; the CPU
executors alternate the halves by call and stay exact."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.measure.compare import check_program
from purlin_bench.program.model import Consume, Notify, Program
from purlin_bench.program.validate import ProgramInvalid, validate
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies.derive import derive_program


def program(name: str, ranks: int, count: int = 1001, strategy: str = "push-parity", inplace: bool = False, **params):
    inst = instantiate(load_builtin(name), ranks, count, 4)
    return inst, derive_program(inst, strategy, "float32", None, params, inplace)


def roles(p: Program) -> list[str]:
    return [step.role for _, step in p.steps() if isinstance(step, Notify)]


@pytest.mark.parametrize("name", ["all-reduce", "reduce-scatter"])
@pytest.mark.parametrize("ranks", [2, 3, 5, 8])
@pytest.mark.parametrize("inplace", [False, True])
def test_a_reduction_every_rank_feeds_takes_one_flag_exchange_and_stays_exact(name, ranks, inplace):
    inst, p = program(name, ranks, inplace=inplace, channels=2)
    assert p.parity_scratch and p.schema == 3
    assert set(roles(p)) == {"data"}  # no ready, no done
    _, push = program(name, ranks, strategy="push", inplace=inplace, channels=2)
    assert {"ready", "done"} <= set(roles(push)) and not push.parity_scratch
    # Five calls: the halves alternate, every call on fresh inputs.
    assert check_program(inst, p, NumpyRunner(p, seed=1), seed=2, calls=5).wrong == 0


@pytest.mark.parametrize(
    ("name", "ranks"), [("all-gather", 3), ("reduce", 3), ("broadcast", 4), ("all-to-all", 3), ("all-reduce", 1)]
)
def test_elsewhere_it_is_push_as_it_is(name, ranks):
    # Copies write outputs, a rooted reduce's root sends nothing back: no pair qualifies.
    _, p = program(name, ranks)
    _, push = program(name, ranks, strategy="push")
    assert not p.parity_scratch and p.lists == push.lists and p.schema == push.schema


def test_sizes_per_call_keep_the_windows():
    inst = instantiate(load_builtin("reduce-scatter-v"), 3, 64, 4)
    p = derive_program(inst, "push-parity", "float32", "sum")
    assert not p.parity_scratch and "ready" in roles(p)


def test_the_halves_alternate_by_call():
    inst, p = program("all-reduce", 2, count=16)
    runner = NumpyRunner(p, seed=0)
    half = p.scratch_count
    assert len(runner.memory[(0, "scratch")]) == 2 * half
    written = []
    for call in range(3):
        check_program(inst, p, runner, seed=call, calls=1)
        # Each call poisons everything (NaN: this executor runs calls one at a time), then fills only its half.
        poisoned = np.isnan(runner.memory[(0, "scratch")])
        written.append((not poisoned[:half].any(), not poisoned[half:].any()))
    assert written == [(False, True), (True, False), (False, True)]  # calls 1, 3: the second half; call 2: the first


def test_a_writer_that_waits_on_nothing_of_the_owner_is_refused():
    # Reduce's non-roots push into the root's scratch and wait on nothing of
    # it: without 'ready', a non-root two calls on could overwrite a slot the
    # root has not read yet. Force parity onto push's program to see the rule.
    inst, push = program("reduce", 3, count=64, strategy="push")

    def strip(steps):
        kept = []
        for step in steps:
            if isinstance(step, Notify) and step.role != "data":
                continue
            if isinstance(step, Consume):
                waits = tuple(f for f in step.waits if f in data_flags)
                if step.op == "wait" and not waits:
                    continue
                step = dataclasses.replace(step, waits=waits)
            kept.append(step)
        return tuple(kept)

    data_flags = {s.flag for _, s in push.steps() if isinstance(s, Notify) and s.role == "data"}
    lists = tuple(tuple(strip(steps) for steps in chans) for chans in push.lists)
    forced = dataclasses.replace(push, lists=lists, parity_scratch=True)
    with pytest.raises(ProgramInvalid, match=r"\(parity scratch\) though rank 1 waits on nothing of rank 0"):
        validate(forced, inst)
    # The same program without parity is refused for the missing 'ready', as before.
    with pytest.raises(ProgramInvalid, match="no 'ready' from it"):
        validate(dataclasses.replace(forced, parity_scratch=False), inst)


def test_parity_scratch_is_written_and_read_back():
    _, p = program("all-reduce", 3)
    back = Program.from_dict(json.loads(p.to_json()))
    assert back == p and back.parity_scratch
    _, push = program("all-reduce", 3, strategy="push")
    assert "parity_scratch" not in push.to_dict()  # other programs are written as before


def test_a_half_off_the_16_byte_grid_is_refused():
    # A program read back from a file is not derived: its halves are checked.
    inst, p = program("all-reduce", 2, count=64)
    odd = dataclasses.replace(p, scratch_count=p.scratch_count + 1)
    with pytest.raises(ProgramInvalid, match="parity scratch halves are 260 bytes, not a multiple of 16"):
        validate(odd, inst)
