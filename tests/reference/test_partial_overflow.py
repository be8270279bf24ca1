"""A float16 ring keeps partial sums in float16 and overflows where one
reduction does not (40000 + 40000 - 40000); the check names that cause in its
note instead of only counting wrong elements (issue 15)."""

from __future__ import annotations

import numpy as np
import pytest

import purlin_bench.measure.service as measurement
from purlin_bench.backends.numpy import NumpyBackend
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.backends.port import run_once
from purlin_bench.measure.compare import compare, partial_overflow
from purlin_bench.tools import check as m
from purlin_bench.base.dtypes import DTYPES
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_builtin

F16 = DTYPES["float16"]


def _inputs(dtype, n=16):
    return [np.full(n, v, dtype=dtype) for v in (40000.0, 40000.0, -40000.0)]


def test_the_ring_overflows_where_direct_does_not_and_the_result_says_why():
    # 48 elements: each rank's part of the ring is 16, and the part that starts
    # at rank 0 adds 40000 + 40000 first.
    inst = instantiate(load_builtin("all-reduce"), 3, 48, 2)
    inputs = _inputs(F16, 48)
    ring = derive_program(inst, "ring", "float16")
    ring_result = compare(inst, ring, inputs, run_once(NumpyRunner(ring), inputs))
    assert ring_result.wrong > 0 and ring_result.overflowed > 0
    assert "can overflow float16 in a partial sum" in ring_result.note("float16")
    direct = derive_program(inst, "direct", "float16")
    assert compare(inst, direct, inputs, run_once(NumpyRunner(direct), inputs)).ok


@pytest.mark.parametrize(
    ("dtype", "values", "redop", "expected"),
    [
        ("float16", (40000.0, 40000.0, -40000.0), "sum", 48),  # 3 ranks x 16 elements
        ("float16", (1.0, 2.0, 3.0), "sum", 0),  # no partial near the max
        ("float16", (40000.0, 40000.0, -40000.0), "max", 0),  # max/min cannot overflow
        ("float16", (70000.0, 1.0, 1.0), "sum", 0),  # the reference overflows too: not a partial's fault
        ("bfloat16", (3e38, 3e38, -3e38), "sum", 48),
        ("float32", (3e38, 3e38, -3e38), "sum", 48),
    ],
)
def test_partial_overflow_counts_only_overflows_the_reference_does_not_have(dtype, values, redop, expected):
    inst = instantiate(load_builtin("all-reduce"), 3, 16, DTYPES[dtype].itemsize)
    with np.errstate(over="ignore"):
        inputs = [np.full(16, v).astype(DTYPES[dtype]) for v in values]
    assert partial_overflow(inst, redop, DTYPES[dtype], inputs) == expected


def test_int32_is_never_an_overflow_it_wraps():
    inst = instantiate(load_builtin("all-reduce"), 3, 16, 4)
    big = np.iinfo(np.int32).max
    inputs = [np.full(16, big, dtype=np.int32)] * 3
    assert partial_overflow(inst, "sum", np.dtype(np.int32), inputs) == 0


def test_purlin_checks_note_names_the_cause(monkeypatch):
    # The tools' exact inputs never overflow; make them 40000s to see the note.
    def near_max(counts, dtype, redop, seed=0):
        return [np.resize(np.array([40000.0, 40000.0, -40000.0][r % 3]), n).astype(dtype) for r, n in enumerate(counts)]

    monkeypatch.setattr(measurement, "exact_inputs", near_max)
    monkeypatch.setattr(m, "exact_inputs", near_max)
    spec = load_builtin("all-reduce")
    request = m.Request((spec,), (3,), ("ring", "direct"), ("float16",), (64,), None, None, (False,))
    runner = m.JobRunner(NumpyBackend, 0)
    outcomes = {o.combo.strategy: o for o in (runner.run(j) for j in m.expand(request))}
    assert outcomes["direct"].status == m.PASS and outcomes["direct"].note == ""
    ring = outcomes["ring"]
    assert ring.status == m.FAIL
    assert (
        "differ from the reference" in ring.note and "can overflow float16 in a partial sum in ring order" in ring.note
    )
