"""Build every interpreter variant into CuPy's disk cache, on all cores at once.

A fresh device machine otherwise compiles each variant (about a second of
NVRTC) the first time a test or a benchmark asks for it, one after another:
on 2026-12-03 the first 7 GPU tests took 3.6 minutes that way. The variants
are a small cross product (dtype, reduction, unroll, block size, flag scope,
copy-only build), so they are built up front, one process per core; CuPy
writes each cache entry atomically, so the processes may share the folder.

    python3 lab/scripts/warm_kernels.py [--jobs N]

With ``--check-compiled RANKS COUNTS DTYPES`` it builds, the same way, the
compiled datapath's program of every combination that ``purlin check all
--backend cupy --kernel compiled --ranks RANKS --count COUNTS --dtype DTYPES
--strategy all --root all`` runs (both in place and out of place): about a
second of NVRTC each, thousands of them, which one process cannot fit into a
device call. Each worker prepares the program exactly as the check does
(``Backend.prepare`` with ``kernel=compiled``), so the check then finds every
build in CuPy's cache.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import time

from purlin_bench.backends.cupy.codegen.atoms import DTYPE_CODES, REDOP_CODES
from purlin_bench.backends.cupy.runtime.runner import PARAMS


def variants() -> list[tuple]:
    choices = {p.name: p.choices for p in PARAMS}
    out = []
    for dtype, unroll, threads, sys_scope in itertools.product(DTYPE_CODES, choices["unroll"], choices["threads"], (False, True)):
        # The copy-only build has no reduction in it: one per dtype, not per reduction.
        out.append((dtype, "sum", unroll, threads, sys_scope, True))
        out.extend((dtype, redop, unroll, threads, sys_scope, False) for redop in REDOP_CODES)
    return out


def build(variant: tuple) -> str | None:
    from purlin_bench.backends.cupy.codegen.atoms import snac_kernel

    dtype, redop, unroll, threads, sys_scope, copy_only = variant
    try:
        snac_kernel(dtype, redop, unroll, threads, 0, sys_scope, copy_only)
    except Exception as exc:  # reported, not fatal: a test would fail on it too
        return f"{variant}: {exc}"
    return None


def check_jobs(ranks: str, counts: str, dtypes: str) -> list[tuple]:
    """(combination, instance) of every job of that check matrix (not its n/a rows)."""
    from purlin_bench.tools import check as m
    from purlin_bench.spec import load_all_builtin

    request = m.Request(
        specs=tuple(load_all_builtin()),
        ranks=tuple(int(r) for r in ranks.split(",")),
        strategies=None,
        dtypes=m.parse_dtypes(dtypes),
        counts=tuple(int(c) for c in counts.split(",")),
        roots=None,
        redops=None,
        inplace=(False, True),
    )
    return [(item.combo, item.inst) for item in m.expand(request) if isinstance(item, m.Job)]


_SERVICES: dict[int, object] = {}  # this worker's, one per rank count (as the check's Runner keeps them)


def build_compiled(job: tuple) -> str | None:
    from purlin_bench.backends.cupy import CupyBackend
    from purlin_bench.base.config import RunConfig
    from purlin_bench.base.errors import PurlinError
    from purlin_bench.measure.service import MeasurementService

    combo, inst = job
    if combo.ranks not in _SERVICES:
        _SERVICES[combo.ranks] = MeasurementService(CupyBackend(combo.ranks))
    service = _SERVICES[combo.ranks]
    backend = service.backend
    config = RunConfig.make(combo.strategy, {}, {"kernel": "compiled"})
    try:
        program = service.program(inst, config, combo.dtype, combo.redop, combo.inplace)
        with backend.guard():
            backend.prepare(program, 1, **dict(config.exec_params)).close()
    except PurlinError as exc:  # the check reports the same (a program past the compiled kernel's bound)
        return f"refused: {combo}: {exc}"
    except Exception as exc:
        return f"{combo}: {exc}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--check-compiled", nargs=3, metavar=("RANKS", "COUNTS", "DTYPES"), help="the compiled programs of that check matrix, e.g. 2,3,8 1,1001,16384 float32,bfloat16,int32")
    args = ap.parse_args()
    todo, work, what = (check_jobs(*args.check_compiled), build_compiled, "compiled programs") if args.check_compiled else (variants(), build, "variants")
    start = time.perf_counter()
    # spawn: every worker makes its own CUDA context (a forked one cannot).
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs)) as pool:
        outcomes = [f for f in pool.imap_unordered(work, todo, chunksize=4 if args.check_compiled else 1) if f]
    refused = [f for f in outcomes if f.startswith("refused: ")]
    failed = [f for f in outcomes if not f.startswith("refused: ")]
    print(f"warm_kernels: {len(todo) - len(outcomes)} of {len(todo)} {what} in cache in {time.perf_counter() - start:.0f} s ({args.jobs} processes), {len(refused)} refused")
    for line in failed:
        print("  failed:", line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
