"""Element types, reductions in high precision, and how results are compared.

bfloat16 and the fp8 types (float8_e4m3fn, float8_e5m2: what MoE dispatch
moves) come from ``ml_dtypes`` (the types JAX uses), so NumPy arrays of them
behave like any other dtype on the CPU. Copies move their bytes; reductions of
fp8 accumulate in float32 and round once to fp8 (:func:`accumulate`), as the
GPU datapath will.
"""

from __future__ import annotations

from typing import Sequence

import ml_dtypes
import numpy as np

from purlin_bench.base.errors import PurlinError

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int32": np.dtype(np.int32),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
# The fp8 types: one byte, reduced through float32 (accumulate).
FP8 = ("float8_e4m3fn", "float8_e5m2")
# nccl-tests' short names, accepted on the command line.
ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bf16": "bfloat16",
    "int": "int32",
    "f32": "float32",
    "f16": "float16",
    "f64": "float64",
    "i32": "int32",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "fp8": "float8_e4m3fn",
}
REDOPS = ("sum", "prod", "max", "min")


def resolve_dtype(name: str) -> tuple[str, np.dtype]:
    canonical = ALIASES.get(name, name)
    if canonical not in DTYPES:
        raise PurlinError(f"unknown dtype '{name}' (known: {', '.join(DTYPES)})")
    return canonical, DTYPES[canonical]


def is_integer(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.integer)


def is_fp8(dtype: np.dtype) -> bool:
    return any(dtype == DTYPES[name] for name in FP8)


def _wide(dtype: np.dtype) -> type:
    """What a reduction accumulates in: int64 for integers (wrapping as the
    device's int32 does once cast back), float32 for fp8 (as the datapath
    will: one float32 sum, rounded to fp8 once), float64 for the rest."""
    if is_integer(dtype):
        return np.int64
    return np.float32 if is_fp8(dtype) else np.float64


def accumulate(parts: Sequence[np.ndarray], redop: str) -> np.ndarray:
    """Reduce ``parts`` elementwise in float64 (int64 for integers, float32
    for fp8: the caller rounds the float32 result to fp8 once).

    Integer sums and products wrap like the device's int32 arithmetic once cast
    back: int64 wraps modulo 2**64, which preserves the value modulo 2**32."""
    wide = _wide(parts[0].dtype)
    acc = parts[0].astype(wide)
    with np.errstate(over="ignore"):
        for part in parts[1:]:
            p = part.astype(wide)
            if redop == "sum":
                acc = acc + p
            elif redop == "prod":
                acc = acc * p
            elif redop == "max":
                acc = np.maximum(acc, p)
            elif redop == "min":
                acc = np.minimum(acc, p)
            else:
                raise PurlinError(f"unknown reduction '{redop}' (known: {', '.join(REDOPS)})")
    return acc


def count_wrong(actual: np.ndarray, expected: np.ndarray, tolerance: np.ndarray | None) -> int:
    """Elements of ``actual`` that differ from ``expected``: bit for bit where
    ``tolerance`` is None, else by more than ``tolerance`` (NaN never passes)."""
    if actual.shape != expected.shape:
        return max(actual.size, expected.size)
    if actual.size == 0:
        return 0
    if tolerance is None:
        a = actual.view(np.uint8).reshape(actual.size, -1)
        e = expected.view(np.uint8).reshape(expected.size, -1)
        return int(np.count_nonzero(np.any(a != e, axis=1)))
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    bad = ~(np.abs(a - e) <= tolerance)
    return int(np.count_nonzero(bad))


def reduction_tolerance(parts: Sequence[np.ndarray], redop: str, dtype: np.dtype) -> np.ndarray | None:
    """Per-element bound on |result - float64 reference| for a reduction.

    Executors may accumulate in any order and round partial results to the
    buffer dtype at every hop (a ring does), so the bound scales with the number
    of operands times the dtype's epsilon, relative to the operands' magnitude
    (sum of |x| for sums, so cancellation cannot make it vanish). max/min and
    integer ops are exact (None: compare bit for bit)."""
    if is_integer(dtype):
        return None
    if redop in ("max", "min"):
        return np.zeros(parts[0].shape)  # exact, but -0.0 equals 0.0
    info = ml_dtypes.finfo(dtype)  # numpy's finfo refuses bfloat16 from numpy 2.5 on
    eps = float(info.eps)
    n = len(parts)
    mags = np.stack([np.abs(p.astype(np.float64)) for p in parts])
    scale = mags.sum(axis=0) if redop == "sum" else np.prod(mags, axis=0)
    tiny = float(info.smallest_normal)
    return (n + 1) * eps * scale + tiny


# Integer inputs near the ends of the type: sums and products of them wrap,
# so a check exercises the two's-complement rule (see accumulate), not only
# values that never leave the range.
_EDGE = 1000


def random_inputs(
    rng: np.random.Generator, counts: Sequence[int], dtype: np.dtype, redop: str | None
) -> list[np.ndarray]:
    """Random inputs for checks: values in [-1, 1) for floats (products stay in
    range). For integers, about half the elements lie within 1000 of the
    type's minimum or maximum, so sums and products overflow and wrap, and the
    rest are small (in [-1000, 1000], or [-3, 3] for products, so some
    products stay unwrapped). The reference wraps the same way: it accumulates
    in int64, which wraps modulo 2**64 and so keeps every value modulo 2**32,
    then casts to int32."""
    if is_integer(dtype):
        info = np.iinfo(dtype)
        low, high = (-3, 4) if redop == "prod" else (-1000, 1001)
        out = []
        for n in counts:
            small = rng.integers(low, high, size=n)
            # Offsets 0.._EDGE-1 from the top (positive) or bottom (negative) end.
            edge = np.where(
                rng.random(n) < 0.5,
                int(info.max) - rng.integers(0, _EDGE, size=n),
                int(info.min) + rng.integers(0, _EDGE, size=n),
            )
            out.append(np.where(rng.random(n) < 0.5, edge, small).astype(dtype))
        return out
    return [rng.uniform(-1.0, 1.0, size=n).astype(dtype) for n in counts]
