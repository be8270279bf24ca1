"""Inputs whose exact results are known: small integers in every type.

Sums of values in [-4, 4] over up to 64 ranks stay below 256, which bfloat16
(8 significant bits) still holds exactly; products use +-1 and +-2 (powers of
two), max/min any small integers. So copies and reductions are exact in every
dtype and in any order, and a benchmark can demand zero wrong elements."""

from __future__ import annotations

import numpy as np


def exact_inputs(counts: list[int] | tuple[int, ...], dtype: np.dtype, redop: str | None, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {"prod": np.array([-2, -1, 1, 2])}.get(redop or "sum", np.arange(-4, 5))
    return [values[rng.integers(0, len(values), size=n)].astype(dtype) for n in counts]
