"""Inputs whose exact results are known: small integers in every type.

Sums of values in [-4, 4] over up to 64 ranks stay below 256, which bfloat16
(8 significant bits) still holds exactly; products use +-1 and +-2 (powers of
two), max/min any small integers. So copies and reductions are exact in every
dtype and in any order, and a benchmark can demand zero wrong elements.

fp8 holds every integer only up to 8 (float8_e5m2) or 16 (float8_e4m3fn), so
its sums take 0 or +1 on even ranks and 0 or -1 on odd ones: every partial
sum of any set of ranks is at most half the ranks in size, exact in either
type up to 16 ranks (e5m2) or 32 (e4m3fn), in any order a strategy adds them
(a ring's partials are rounded to fp8 at every hop). Its products take +-1;
copies, max and min the same values as every other type."""

from __future__ import annotations

import numpy as np

from purlin_bench.base.dtypes import is_fp8

# Random draws beyond this many elements repeat with this period: drawing 8 x
# 256 Mi values took seconds per 1 GiB benchmark row; tiling takes a copy. The
# period is prime, so no slice, chunk or vector boundary (powers of two) lines
# up with it, and a misplaced block still shows as wrong elements.
_PERIOD = 1_000_003


def exact_inputs(
    counts: list[int] | tuple[int, ...], dtype: np.dtype, redop: str | None, seed: int = 0
) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {"prod": np.array([-2, -1, 1, 2])}.get(redop or "sum", np.arange(-4, 5))
    if is_fp8(dtype) and redop in ("sum", "prod"):
        values = np.array([-1, 1])
    out = []
    for rank, n in enumerate(counts):
        draw = values[rng.integers(0, len(values), size=min(n, _PERIOD))]
        if is_fp8(dtype) and redop == "sum":
            draw = np.where(draw > 0, 1 if rank % 2 == 0 else -1, 0)  # see the module doc
        block = draw.astype(dtype)
        out.append(block if n <= _PERIOD else np.resize(block, n))
    return out
