"""`purlin bench` with every variable row's counts even: the row's total split
into equal counts, each a multiple of 16 bytes where the total allows (the rest
on the last), so a -v collective's slices sit where the fixed collective's do.
Times the variable machinery alone against the fixed collective of the same
size (session 23: uniform counts ran 1.06-1.7x the fixed collective, and what of
that is alignment, uneven sizes or the machinery was not split).

    python3 lab/scripts/bench_even_counts.py reduce-scatter-v -b 2M -e 32M -f 4 --backend cupy --no-inplace

Any `purlin bench` arguments; `--counts` is ignored (every row even; the header
still names it)."""

from __future__ import annotations

import sys

import numpy as np

from purlin_bench.cli.main import run
from purlin_bench.tools.bench import run as bench_run


def even_counts(inst, total: int, distribution: str, rng: np.random.Generator) -> tuple[int, ...]:
    n = len(inst.count_keys)
    step = max(1, 16 // inst.itemsize)  # elements in 16 bytes
    each = total // n // step * step
    counts = [each] * n
    counts[-1] += total - each * n
    return tuple(counts)


if __name__ == "__main__":
    bench_run.counts_for_total = even_counts
    sys.exit(run(["bench", *sys.argv[1:]]))
