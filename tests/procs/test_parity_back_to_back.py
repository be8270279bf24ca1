"""push-parity's calls back to back on the rank runners of one process per
rank (two ranks on two threads, shared memory): each rank changes its own
input before each call and keeps each call's output, with no barrier
between calls, so one rank runs into the next call while the other is still
reading this one. Parity scratch keeps every call exact; the same program
without it (ready/done dropped, one scratch) is shown wrong, so the test can
fail."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from purlin_bench.backends.numpy.ranks import RankRunner
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.program.model import Consume
from purlin_bench.spec.instance import instantiate
from purlin_bench.spec.loader import resolve
from purlin_bench.strategies.derive import derive_program
from tests.procs.test_rank_runners import _two_ranks

CALLS = 6


def _run_back_to_back(tmp_path, program, inst, slow_reader: bool) -> list[list[np.ndarray]]:
    server, procs = _two_ranks(tmp_path, 10)
    runners: list[RankRunner | None] = [None, None]
    threads = [
        threading.Thread(target=lambda r=r: runners.__setitem__(r, RankRunner(program, procs[r], 1, "b2b")))
        for r in range(2)
    ]
    [t.start() for t in threads]
    [t.join() for t in threads]
    inputs = exact_inputs(program.in_counts, np.dtype(np.float32), "sum")
    runners[0].load(inputs, 0)
    if slow_reader:
        # Rank 1 dawdles before each reduce: rank 0, done with the call, is
        # then already writing the next one while rank 1 has not read this one.
        real = runners[1]._step

        def late(step, slot):
            if isinstance(step, Consume) and step.op == "reduce":
                time.sleep(0.05)
            return real(step, slot)

        runners[1]._step = late
    outs: list[list[np.ndarray]] = [[], []]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            for _ in range(CALLS):
                runners[r].buffer(r, "in", 0)[...] += 1  # its own input, between its own calls
                runners[r].run(0)
                outs[r].append(runners[r].buffer(r, "out", 0).copy())
        except BaseException as exc:  # noqa: BLE001 - re-raised below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for r in runners:
        r.close()
    server.close()
    if errors:
        raise errors[0]
    wrong = []
    for i in range(CALLS):
        expected = inst.reference([x + (i + 1) for x in inputs], "sum")
        wrong.append([int(np.count_nonzero(outs[r][i] != expected[r])) for r in range(2)])
    return wrong


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", ["all-reduce", "reduce-scatter"])
def test_parity_scratch_keeps_calls_back_to_back_exact(tmp_path, collective):
    inst = instantiate(resolve(collective), 2, 1001, 4)
    program = derive_program(inst, "push-parity", "float32", "sum")
    assert program.parity_scratch
    assert _run_back_to_back(tmp_path, program, inst, slow_reader=True) == [[0, 0]] * CALLS


@pytest.mark.timeout(60)
def test_without_parity_scratch_the_next_call_overwrites_this_one(tmp_path):
    inst = instantiate(resolve("all-reduce"), 2, 1001, 4)
    program = dataclasses.replace(derive_program(inst, "push-parity", "float32", "sum"), parity_scratch=False)
    wrong = _run_back_to_back(tmp_path, program, inst, slow_reader=True)
    assert any(w[1] for w in wrong[:-1]), wrong  # rank 1 read rank 0's next call
