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
from purlin_bench.backends.cupy.codegen.compiled import MAX_BATCHED_NOTIFIES, _flags
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.derive import derive_program

COLLECTIVES = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "all-to-all-v"]
BARRIER = "__syncthreads();  // the whole block's writes happen before the release"


def _groups(source: str) -> list[list[str]]:
    body = source.split("switch (blockIdx.x / B) {", 1)[1]
    return [part.split("} break;", 1)[0].splitlines() for part in re.split(r"\n  case \d+: \{", body)[1:]]


def _check(program, ranks: int) -> int:
    """Asserts the release rules on ``program``'s source; the number of releases."""
    source = CupyBackend(ranks).source(program, kernel="compiled")
    lowered = lower(program, list(range(ranks)), True, "sm", flag_id)
    groups = _groups(source)
    assert len(groups) == len(lowered.groups)
    releases = 0
    for lines, (begin, end, _, _) in zip(groups, lowered.groups.tolist()):
        ops = lowered.ops[begin:end]
        due, released, k, barrier = Counter(), Counter(), -1, False

        def notified(op) -> list[str]:
            return [_flags([int(i)]) for i in op["notify"][: int(op["nnotify"])]]

        for line in lines:
            if "// step " in line:
                if k >= 0:
                    due.update(notified(ops[k]))
                k += 1
                assert int(line.split("// step ")[1].split(":")[0]) == int(ops[k]["step"])
            if "purlin_wait<" in line:
                assert not due - released, f"step {int(ops[k]['step'])} waits before releasing {due - released}"
            if BARRIER in line:
                barrier = True
            bumps = re.findall(r"red_release\(([^)]*)\)", line)
            if bumps:
                assert barrier, line
                assert len(bumps) <= max(MAX_BATCHED_NOTIFIES, len(notified(ops[k])))
                released.update(bumps)
                releases, barrier = releases + 1, False
        due.update(notified(ops[k]))
        assert released == due
    return releases


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("ranks", [3, 8])
def test_every_notify_is_released_once_before_the_next_wait(collective, ranks):
    checked = 0
    for strategy in STRATEGIES:
        inst = instantiate(load_builtin(collective), ranks, 1001, 4)
        try:
            program = derive_program(inst, strategy, "float32", "sum" if inst.op == "reduce" else None)
            _check(program, ranks)
        except PurlinError:  # a strategy this collective does not take, or past the build bound
            continue
        checked += 1
    assert checked >= 3


def test_push_parity_releases_once_a_rank():
    inst = instantiate(load_builtin("all-reduce"), 8, 4096, resolve_dtype("float32")[1].itemsize)
    program = derive_program(inst, "push-parity", "float32", "sum")
    assert _check(program, 8) == 8  # each rank pushes to 7 peers, then one release, then its one wait
