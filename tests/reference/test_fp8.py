"""fp8 element types (issue 31, item 5): float8_e4m3fn and float8_e5m2 for
every collective on the CPU reference. Copies move bytes; reductions
accumulate in float32 and round to fp8 once; exact check inputs keep every
partial sum exact, so purlin check demands zero wrong elements; a backend that
does not move fp8 yet says so (n/a in check, one line elsewhere)."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from purlin_bench.backends import backend_class
from purlin_bench.backends.port import unsupported
from purlin_bench.base.dtypes import DTYPES, accumulate, resolve_dtype
from purlin_bench.base.inputs import exact_inputs
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_builtin
from tests.tools.test_cli import purlin

FP8 = ("float8_e4m3fn", "float8_e5m2")


def test_fp8_types_and_their_short_names():
    assert DTYPES["float8_e4m3fn"] == np.dtype(ml_dtypes.float8_e4m3fn) and DTYPES["float8_e5m2"].itemsize == 1
    assert resolve_dtype("e4m3")[0] == "float8_e4m3fn" and resolve_dtype("e5m2")[0] == "float8_e5m2"


@pytest.mark.parametrize(("name", "big"), [("float8_e4m3fn", 16.0), ("float8_e5m2", 8.0)])
def test_a_reduction_accumulates_in_float32_and_rounds_once(name, big):
    dtype = DTYPES[name]
    parts = [np.array([big], dtype), np.array([1.0], dtype), np.array([1.0], dtype)]
    # Rounded at every step, big + 1 is a tie that rounds back to big (twice); once, big + 2 is exact.
    stepwise = accumulate([accumulate(parts[:2], "sum").astype(dtype), parts[2]], "sum").astype(dtype)
    assert accumulate(parts, "sum").dtype == np.float32
    assert float(accumulate(parts, "sum").astype(dtype)[0]) == big + 2 and float(stepwise[0]) == big
    inst = instantiate(load_builtin("all-reduce"), 3, 1, 1)
    assert float(inst.reference(parts, "sum")[0][0]) == big + 2  # the reference rounds once too


@pytest.mark.parametrize("name", FP8)
def test_exact_sums_stay_exact_in_any_order(name):
    dtype = DTYPES[name]
    limit = {"float8_e5m2": 8, "float8_e4m3fn": 16}[name]  # every integer up to this is an fp8 value
    for ranks in (2, 9, 16):
        x = np.stack(exact_inputs([4096] * ranks, dtype, "sum", seed=ranks)).astype(np.float32)
        assert set(np.unique(x)) <= {-1.0, 0.0, 1.0}
        prefix = np.cumsum(np.roll(x, 3, axis=0), axis=0)  # a ring's partials, from any start
        assert np.abs(prefix).max() <= min(limit, (ranks + 1) // 2)
    copies = np.concatenate(exact_inputs([4096] * 3, dtype, None))
    assert len(np.unique(copies.astype(np.float32))) == 9  # copies keep telling chunks apart


def test_every_collective_is_exact_in_fp8_on_the_cpu(capsys):
    code, out, _ = purlin(
        capsys, "check", "all", "--dtype", ",".join(FP8), "--op", "all", "--ranks", "1,2,9", "--count", "77", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["summary"]["failed"] == 0 and data["summary"]["errors"] == 0
    assert {r["dtype"] for r in data["results"] if r["status"] == "pass"} == set(FP8)
    assert len({r["collective"] for r in data["results"] if r["status"] == "pass"}) == 11


def test_a_backend_that_does_not_move_fp8_says_so():
    program = derive_program(instantiate(load_builtin("all-gather"), 2, 8, 1), "direct", "float8_e5m2")
    assert "does not move float8_e5m2 yet" in unsupported(backend_class("cupy"), program)
    assert unsupported(backend_class("numpy"), program) is None
