"""How long nvcc takes to build the compiled datapath's source, by program:
the measurements behind the compiled kernel's build bound
(``MAX_BUILD_WEIGHT`` in purlin_bench/backends/cupy/codegen/compiled.py). Needs nvcc,
no GPU; programs past the bound are generated and timed too.

    python3 lab/scripts/build_time.py [--arch sm_90] [--max-weight 1200] [--jobs 1]

One row per program: its ops, its build weight (slices moved plus flags),
whether the bound takes it, and nvcc's wall seconds for a cubin. Time with
--jobs 1 on an idle machine: parallel builds share the cores.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from purlin_bench.backends.cupy import CupyBackend  # noqa: E402
from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight, options_of  # noqa: E402
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower  # noqa: E402
from purlin_bench.strategies.derive import derive_program  # noqa: E402
from purlin_bench.spec import instantiate, load_builtin  # noqa: E402

# (collective, strategy, elements, plan parameters, unroll): from the
# defaults' sizes (a few ops) to rings over many slices.
PROGRAMS = (
    ("reduce-scatter", "direct", 1024, {}, 2),
    ("all-reduce", "two-shot", 2048, {}, 2),
    ("all-gather", "direct", 1024, {}, 4),
    ("all-to-all", "direct", 1024, {"channels": 2}, 4),
    ("all-reduce", "ring", 8192, {}, 2),
    ("all-reduce", "ring", 262144, {"slice_bytes": 65536}, 2),
    ("all-reduce", "ring", 262144, {"slice_bytes": 32768}, 2),
    ("reduce-scatter", "two-shot", 1024, {"channels": 4}, 4),
    ("reduce-scatter", "ring", 1024, {}, 2),
    ("reduce-scatter", "ring", 1024, {}, 4),
)


def build_seconds(nvcc: str, arch: str, source: str, where: Path) -> float:
    path = where / "compiled.cu"
    path.write_text(source)
    options = options_of(source)
    start = time.perf_counter()
    done = subprocess.run([nvcc, f"-arch={arch}", "-cubin", *options, "-o", str(where / "compiled.cubin"), "-x", "cu", str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"nvcc failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--max-weight", type=int, default=None, help="skip programs heavier than this (default: time every one)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("build_time: nvcc is not on PATH", file=sys.stderr)
        return 2
    rows = []
    for name, strategy, count, params, unroll in PROGRAMS:
        inst = instantiate(load_builtin(name), 8, count, 4)
        program = derive_program(inst, strategy, "float32", "sum" if inst.op == "reduce" else None, params, False)
        low = lower(program, list(range(8)), True, "sm", flag_id)
        weight = build_weight(low)
        if args.max_weight is not None and weight > args.max_weight:
            continue
        source = CupyBackend(8).source(program, bounded=False, kernel="compiled", unroll=unroll)
        rows.append((f"{name} {strategy} {count} {params or ''} unroll {unroll}", len(low.ops), weight, source))

    def timed(row):
        with tempfile.TemporaryDirectory() as where:
            return build_seconds(nvcc, args.arch, row[3], Path(where))

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        seconds = list(pool.map(timed, rows))
    print(f"# nvcc -arch={args.arch}, 8 ranks, float32; build bound {MAX_BUILD_WEIGHT}")
    print(f"{'program':<62} {'ops':>5} {'weight':>7} {'taken':>6} {'nvcc s':>7}")
    for (what, ops, weight, _), s in zip(rows, seconds):
        print(f"{what:<62} {ops:>5} {weight:>7} {'yes' if weight <= MAX_BUILD_WEIGHT else 'no':>6} {s:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
