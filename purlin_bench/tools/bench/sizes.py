"""Message sizes the way nccl-tests sweeps them (-b, -e, -f)."""

from __future__ import annotations

from purlin_bench.base.errors import PurlinError


def sweep(minbytes: int, maxbytes: int, stepfactor: int) -> list[int]:
    if minbytes < 1:
        raise PurlinError(f"--minbytes must be at least 1, got {minbytes}")
    if maxbytes < minbytes:
        raise PurlinError(f"--maxbytes ({maxbytes}) is smaller than --minbytes ({minbytes})")
    if stepfactor < 2:
        raise PurlinError(f"--stepfactor must be at least 2, got {stepfactor}")
    sizes, size = [], minbytes
    while size <= maxbytes:
        sizes.append(size)
        size *= stepfactor
    return sizes
