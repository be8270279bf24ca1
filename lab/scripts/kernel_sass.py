"""Build one compiled kernel's source with nvcc and print its registers and SASS (no GPU).

    python3 lab/scripts/kernel_sass.py all-gather-v push --ranks 8 --count 372 [--dtype float32]
        [--threads 128] [--arch sm_90] [--grep 'LDG|STG|SEL'] [--source out.cu]

Needs nvcc (CUDA 13 here) and nvdisasm, which this machine lacks: `pip download --no-deps
nvidia-cuda-nvdisasm` from the local index gives a wheel with nvidia/cu13/bin/nvdisasm; pass
its path as NVDISASM. Session 26 found with it that nvcc hoisted loop-invariant count clamps
above a loop's loads (lab/session26/NOTES.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import options_of
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies.derive import derive_program

SIZES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2, "int32": 4}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("collective")
    ap.add_argument("strategy")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--count", type=int, default=1001, help="elements per rank (a variable one's capacity)")
    ap.add_argument("--dtype", default="float32", choices=sorted(SIZES))
    ap.add_argument("--threads", type=int, default=512, help="the launch bound's threads a block")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--grep", default="", help="print only SASS lines matching this regex")
    ap.add_argument("--source", help="also write the generated source here")
    a = ap.parse_args()
    inst = instantiate(load_builtin(a.collective), a.ranks, a.count, SIZES[a.dtype])
    redop = "sum" if inst.op == "reduce" else None
    source = CupyBackend(a.ranks).source(derive_program(inst, a.strategy, a.dtype, redop), kernel="compiled")
    if a.source:
        open(a.source, "w").write(source)
    opts = [o for o in options_of(source) if not o.startswith("-DPURLIN_MAX_THREADS")]
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
        open(cu, "w").write(source)
        built = subprocess.run(["nvcc", "-x", "cu", *opts, f"-DPURLIN_MAX_THREADS={a.threads}", f"-arch={a.arch}",
                                "-cubin", "-o", cubin, cu, "-Xptxas", "-v"], capture_output=True, text=True)
        if built.returncode:
            sys.exit(built.stderr[-2000:])
        print("\n".join(line.strip() for line in built.stderr.splitlines() if "registers" in line or "spill" in line))
        sass = subprocess.run([os.environ.get("NVDISASM", "nvdisasm"), "-c", cubin], capture_output=True, text=True)
        if sass.returncode:
            sys.exit(f"nvdisasm failed (set NVDISASM): {sass.stderr.strip()[:200]}")
    for line in sass.stdout.splitlines():
        if not a.grep or re.search(a.grep, line):
            print(line.strip())


if __name__ == "__main__":
    main()
