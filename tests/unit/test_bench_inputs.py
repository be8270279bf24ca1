"""Benchmark inputs: small integers whose results are exact in every dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from purlin_bench.base import inputs
from purlin_bench.base.inputs import exact_inputs


def test_values_are_small_exact_integers():
    for redop, allowed in (
        (None, set(range(-4, 5))),
        ("sum", set(range(-4, 5))),
        ("prod", {-2, -1, 1, 2}),
        ("max", set(range(-4, 5))),
    ):
        for x in exact_inputs([1000, 3], np.dtype(ml_dtypes.bfloat16), redop, seed=1):
            assert set(x.astype(np.float32).astype(int).tolist()) <= allowed


def test_long_inputs_repeat_with_a_prime_period_and_differ_between_ranks(monkeypatch):
    monkeypatch.setattr(inputs, "_PERIOD", 101)
    a, b = exact_inputs([1000, 1000], np.dtype(np.float32), "sum", seed=3)
    assert a.shape == (1000,) and np.array_equal(a[:101], a[101:202]) and np.array_equal(a[:899], a[101:])
    assert not np.array_equal(a, b)
    # a shift by a power of two shows: the pattern never repeats at such offsets
    assert all(not np.array_equal(a[:500], a[s : s + 500]) for s in (16, 32, 64, 128, 256))


def test_same_seed_same_inputs():
    x = exact_inputs([77, 5], np.dtype(np.int32), "max", seed=9)
    y = exact_inputs([77, 5], np.dtype(np.int32), "max", seed=9)
    assert all(np.array_equal(p, q) for p, q in zip(x, y))
