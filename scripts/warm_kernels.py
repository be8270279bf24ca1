"""Build every interpreter variant into CuPy's disk cache, on all cores at once.

A fresh device machine otherwise compiles each variant (about a second of
NVRTC) the first time a test or a benchmark asks for it, one after another:
on 2026-12-03 the first 7 GPU tests took 3.6 minutes that way. The variants
are a small cross product (dtype, reduction, unroll, block size, flag scope,
copy-only build), so they are built up front, one process per core; CuPy
writes each cache entry atomically, so the processes may share the folder.

    python3 scripts/warm_kernels.py [--jobs N]
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import time

from purlin_bench.backends.cupy.atoms import DTYPE_CODES, REDOP_CODES
from purlin_bench.backends.cupy.executor import PARAMS


def variants() -> list[tuple]:
    choices = {p.name: p.choices for p in PARAMS}
    out = []
    for dtype, unroll, threads, sys_scope in itertools.product(DTYPE_CODES, choices["unroll"], choices["threads"], (False, True)):
        # The copy-only build has no reduction in it: one per dtype, not per reduction.
        out.append((dtype, "sum", unroll, threads, sys_scope, True))
        out.extend((dtype, redop, unroll, threads, sys_scope, False) for redop in REDOP_CODES)
    return out


def build(variant: tuple) -> str | None:
    from purlin_bench.backends.cupy.atoms import snac_kernel

    dtype, redop, unroll, threads, sys_scope, copy_only = variant
    try:
        snac_kernel(dtype, redop, unroll, threads, 0, sys_scope, copy_only)
    except Exception as exc:  # reported, not fatal: a test would fail on it too
        return f"{variant}: {exc}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    todo = variants()
    start = time.perf_counter()
    # spawn: every worker makes its own CUDA context (a forked one cannot).
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        failed = [f for f in pool.imap_unordered(build, todo) if f]
    print(f"warm_kernels: {len(todo) - len(failed)} of {len(todo)} variants in cache in {time.perf_counter() - start:.0f} s ({args.jobs} processes)")
    for line in failed:
        print("  failed:", line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
