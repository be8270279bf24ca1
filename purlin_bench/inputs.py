"""Inputs whose exact results are known: small integers in every type.

Sums of values in [-4, 4] over up to 64 ranks stay below 256, which bfloat16
(8 significant bits) still holds exactly; products use +-1 and +-2 (powers of
two), max/min any small integers. So copies and reductions are exact in every
dtype and in any order, and a benchmark can demand zero wrong elements."""

from __future__ import annotations

import numpy as np

# Random draws beyond this many elements repeat with this period: drawing 8 x
# 256 Mi values took seconds per 1 GiB benchmark row; tiling takes a copy. The
# period is prime, so no slice, chunk or vector boundary (powers of two) lines
# up with it, and a misplaced block still shows as wrong elements.
_PERIOD = 1_000_003


def exact_inputs(counts: list[int] | tuple[int, ...], dtype: np.dtype, redop: str | None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {"prod": np.array([-2, -1, 1, 2])}.get(redop or "sum", np.arange(-4, 5))
    out = []
    for n in counts:
        block = values[rng.integers(0, len(values), size=min(n, _PERIOD))].astype(dtype)
        out.append(block if n <= _PERIOD else np.resize(block, n))
    return out
