"""The compiled datapath releases a run of notifies together: one barrier
and one fence for every notify of the ops since the last wait (push-parity
at 8 processes paid 7 of each in a row). Checked on the source, without a
GPU: no notify is lost or doubled, every notify is released before the
group's next wait (a wait that depended on a later release could deadlock),
and a barrier precedes every release."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import MAX_BATCHED_NOTIFIES, _flags, _slices
from purlin_bench.backends.cupy.runtime.runner import KernelSettings
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.derive import derive_program
from tests.kernels.released import released as released_flags

COLLECTIVES = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "all-to-all-v"]
BARRIER = "__syncthreads();  // the whole block's writes happen before the release"


def _groups(source: str) -> list[list[str]]:
    body = source.split("switch (blockIdx.x / B) {", 1)[1]
    return [part.split("} break;", 1)[0].splitlines() for part in re.split(r"\n  case \d+: \{", body)[1:]]


MOVE = re.compile(r"char\* const src\[\d+\] = \{(.*?)\}; char\* const dst\[\d+\] = \{(.*?)\}; (move_op|var_move)")


def _check(program, ranks: int, jitter: bool = False) -> int:
    """Asserts the release and merge rules on ``program``'s source; the number of releases."""
    settings = KernelSettings(jitter_ns=3000) if jitter else KernelSettings()
    source = CupyBackend(ranks, settings=settings).source(program, kernel="compiled")
    lowered = lower(program, list(range(ranks)), True, "sm", flag_id)
    if "every block takes its share of every op" in source:
        # A pooled variable launch (codegen/variable.py): only where it waits on and notifies nothing.
        assert not (lowered.ops["nwait"].any() or lowered.ops["nnotify"].any())
        body = source.split("every block takes its share of every op", 1)[1]
        assert "purlin_wait<" not in body and not any(released_flags(line) for line in body.splitlines())
        return 0
    groups = _groups(source)
    assert len(groups) == len(lowered.groups)
    releases = 0
    for lines, (begin, end, _, _) in zip(groups, lowered.groups.tolist()):
        ops = lowered.ops[begin:end]
        due, released, k, barrier = Counter(), Counter(), -1, False
        covered: list[int] = []  # ops whose step comment came since the last data move
        written: set[int] = set()  # ops whose data move (or none) is in the source so far
        owner = {}

        def notified(op) -> list[str]:
            return [_flags([int(i)]) for i in op["notify"][: int(op["nnotify"])]]

        for line in lines:
            if "// step " in line:
                if k >= 0:
                    due.update(notified(ops[k]))
                k += 1
                assert int(line.split("// step ")[1].split(":")[0]) == int(ops[k]["step"])
                owner.update((flag, k) for flag in notified(ops[k]))
                if int(ops[k]["op"]):
                    covered.append(k)
                else:
                    written.add(k)
            move = MOVE.search(line)
            if move:
                # One move: the covered ops, one source between them, their destinations in order.
                assert covered, line
                srcs = {_slices(ops[i]["src"][: int(ops[i]["nsrc"])]) for i in covered}
                dsts = [d for i in covered for d in ops[i]["dst"][: int(ops[i]["ndst"])]]
                if move.group(3) == "move_op":  # a variable program's slices are sized in its own text
                    assert srcs == {move.group(1)} and move.group(2) == _slices(dsts), line
                assert len(covered) == 1 or len(srcs) == 1
                written.update(covered)
                covered = []
            if "purlin_wait<" in line:
                assert not due - released, f"step {int(ops[k]['step'])} waits before releasing {due - released}"
            if BARRIER in line:
                barrier = True
            bumps = released_flags(line)
            if bumps:
                assert barrier, line
                assert all(owner[b] in written for b in bumps), f"{line}: released before its op's data move"
                # A release names each rank once: one that streams slices to a rank hands each on in turn.
                assert len({b.split(" + ")[0] for b in bumps}) == len(bumps) or len(bumps) == len(notified(ops[k]))
                assert len(bumps) <= max(MAX_BATCHED_NOTIFIES, len(notified(ops[k])))
                released.update(bumps)
                releases, barrier = releases + 1, False
        due.update(notified(ops[k]))
        assert released == due
    return releases


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize(
    ("ranks", "inplace", "params", "jitter"),
    [
        (3, False, {}, False),
        (8, False, {}, False),
        (4, True, {}, False),
        (4, False, {"slice_bytes": 1024}, False),
        (4, False, {"channels": 2}, False),
        (3, True, {"slice_bytes": 512, "channels": 2}, True),
    ],
)
def test_every_notify_is_released_once_after_its_data_and_before_the_next_wait(
    collective, ranks, inplace, params, jitter
):
    spec = load_builtin(collective)
    inst = instantiate(spec, ranks, 1001, 4, ranks - 1 if spec.rooted else 0)
    if inplace and inst.inplace_refusal() is not None:
        pytest.skip(f"{collective} has no in-place form")
    checked = 0
    for strategy in STRATEGIES:
        try:
            redop = "sum" if inst.op == "reduce" else None
            program = derive_program(inst, strategy, "float32", redop, dict(params), inplace)
            _check(program, ranks, jitter)
        except PurlinError:  # a strategy this collective does not take, or past the build bound
            continue
        checked += 1
    assert checked >= 2


def test_a_stream_of_slices_to_one_rank_hands_each_on_before_the_next():
    """ring broadcast's root writes its slices to one rank: batching them
    would hold slice 0 back until the last is written (no pipeline)."""
    inst = instantiate(load_builtin("broadcast"), 4, 65536, 4)
    program = derive_program(inst, "ring", "float32", None, {"slice_bytes": 16 << 10})
    root = _groups(CupyBackend(4).source(program, kernel="compiled"))[0]
    assert sum(bool(released_flags(line)) for line in root) == sum("move_op<" in line for line in root) == 16


def test_push_parity_releases_once_a_rank():
    inst = instantiate(load_builtin("all-reduce"), 8, 4096, resolve_dtype("float32")[1].itemsize)
    program = derive_program(inst, "push-parity", "float32", "sum")
    assert _check(program, 8) == 8  # each rank pushes to 7 peers, then one release, then its one wait
