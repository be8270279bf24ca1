"""Where a small gather's time over torch's goes, in one harness: purlin's
compiled gather, torch's baseline (one memcpy over the stacked ranks) and
bare copy kernels of the gather's shape (8 blocks, each copying its rank's
part into one output) timed side by side by the measurement service's own
timer, every candidate rotating over as many buffer sets as the service's
row of that gather does (8 at small sizes).
Two families of bare kernels. The first differs only in where the 8 parts
live: one allocation, contiguous or 128 B / 4 KiB / 2 MiB apart, or 8
allocations (on 2026-12-03 this showed the layout costs nothing). The
second grows the 8-allocation kernel towards purlin's one difference at a
time: its size a constant, then purlin's 36-parameter list, then a switch
over groups, then 16-byte loads that bypass L1 (ld.global.cg), and last
purlin's own generated kernel launched bare (no runner). Each is checked
after it is timed.

    python3 lab/scripts/gather_gap.py [--bytes 256] [--reps 15]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import options_of
from purlin_bench.backends.cupy.runtime.timing import StreamCandidate
from purlin_bench.backends.port import TimingPolicy
from purlin_bench.tools.bench.run import instances
from purlin_bench.base.config import RunConfig
from purlin_bench.measure.service import MeasurementService, rotation_sets
from purlin_bench.spec import load_builtin

RANKS = 8
KERNEL = (
    'extern "C" __global__ void gather8('
    + ", ".join(f"const uint4* a{k}" for k in range(RANKS))
    + ", uint4* b, int per_block) { const uint4* a = "
    + " : ".join(f"blockIdx.x == {k} ? a{k}" for k in range(RANKS - 1))
    + f" : a{RANKS - 1}; if (threadIdx.x < per_block) b[blockIdx.x * per_block + threadIdx.x] = a[threadIdx.x]; }}"
)


_LD_CG = (
    "__device__ __forceinline__ uint4 ld_cg(const uint4* p) { uint4 v; "
    'asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); return v; }\n'
)
# The bare kernel's steps towards purlin's: (label, purlin's parameter list, switch over groups, ld.global.cg)
STEPS = (
    ("bare, 8 allocations, size a constant", False, False, False),
    ("+ purlin's 36 parameters", True, False, False),
    ("+ a switch over groups", True, True, False),
    ("+ ld.global.cg loads", True, True, True),
)


def step_kernel(per_block: int, purlin_params: bool, switch: bool, cg: bool) -> str:
    """``gather8_step``: gather8 with its vectors a block a constant, and
    the steps asked for. With purlin's parameters, rank k's part is the
    k-th input base (b{3k}) and the output is b1, as in its generated
    gather (root 0); the other bases and the flags are unused, as there."""
    if purlin_params:
        params = [f"char* b{i}" for i in range(3 * RANKS)] + [f"unsigned long long* f{r}" for r in range(RANKS)]
        params += ["unsigned long long* epochs", "long long* status", "int* abort_flag", "unsigned long long timeout_ns"]
        srcs, dst = [f"(const uint4*)b{3 * k}" for k in range(RANKS)], "((uint4*)b1)"
    else:
        params = [f"const uint4* a{k}" for k in range(RANKS)] + ["uint4* b"]
        srcs, dst = [f"a{k}" for k in range(RANKS)], "b"
    load = "ld_cg(a + threadIdx.x)" if cg else "a[threadIdx.x]"
    copy = f"if (threadIdx.x < {per_block}) {dst}[blockIdx.x * {per_block} + threadIdx.x] = {load};"
    if switch:
        body = "switch (blockIdx.x) { " + " ".join(f"case {k}: {{ const uint4* a = {src}; {copy} }} break;" for k, src in enumerate(srcs)) + " }"
    else:
        body = "const uint4* a = " + " : ".join(f"blockIdx.x == {k} ? {src}" for k, src in enumerate(srcs[:-1])) + f" : {srcs[-1]}; {copy}"
    return (_LD_CG if cg else "") + f'extern "C" __global__ void gather8_step({", ".join(params)}) {{ {body} }}\n'


def bare_candidates(nbytes: int, sets: int, purlin_source: tuple[tuple[str, ...], str, int] | None = None) -> tuple[dict[str, StreamCandidate], dict[str, list], object]:
    """name -> candidate rotating over ``sets`` buffer sets, name -> its
    output per set, and the expected output; ``purlin_source`` (options,
    source, grid) adds purlin's generated kernel, launched bare."""
    import cupy

    kernel = cupy.RawKernel(KERNEL, "gather8")
    part = nbytes // RANKS
    n = part // 4
    per_block = np.int32(part // 16)
    expect = cupy.arange(nbytes // 4, dtype=cupy.float32)
    cands, outs = {}, {}
    held = []  # every source array stays alive while its pointers are used

    def make(name: str, kernel, parts_of_set, args_of, grid: int = RANKS, record: bool = False):
        """A candidate launching ``kernel`` with ``args_of(parts, output)``
        of each buffer set, its parts from ``parts_of_set``."""
        dsts = [cupy.zeros(nbytes // 4, dtype=cupy.float32) for _ in range(sets)]
        args = [args_of(parts_of_set(s), dsts[s]) for s in range(sets)]
        stream = cupy.cuda.Stream(non_blocking=True)

        def enqueue(target, i, args=args):
            if record:  # as the runner's launch() does before its copy-engine stages
                cupy.cuda.Event(disable_timing=True).record(target)
            kernel((grid,), (128,), args[i % sets], stream=target)

        cands[name], outs[name] = StreamCandidate(enqueue, stream), dsts

    def one_allocation(stride: int):
        def parts(s):
            whole = cupy.zeros(stride // 4 * (RANKS - 1) + n, dtype=cupy.float32)
            views = [whole[k * (stride // 4) : k * (stride // 4) + n] for k in range(RANKS)]
            for k, v in enumerate(views):
                v[...] = expect[k * n : (k + 1) * n]
            held.append(whole)
            return views
        return parts

    def separate(s):
        arrays = [expect[k * n : (k + 1) * n].copy() for k in range(RANKS)]
        held.extend(arrays)
        return arrays

    def pointers(parts):
        return [np.uint64(p.data.ptr) for p in parts]

    unused = cupy.zeros(64, dtype=cupy.uint64)  # epochs, status, abort word: the kernels never touch them
    held.append(unused)

    def purlin_args(parts, dst):
        """Purlin's parameter list: rank k's input base b{3k}, root 0's output b1, nothing else."""
        bases = [np.uint64(0)] * (3 * RANKS)
        for r, p in enumerate(pointers(parts)):
            bases[3 * r] = p
        bases[1] = np.uint64(dst.data.ptr)
        return (*bases, *([np.uint64(0)] * RANKS), unused, unused, unused, np.uint64(1 << 30))

    def gather8_args(parts, dst):
        return (*pointers(parts), dst, per_block)

    make("bare, one allocation, contiguous", kernel, one_allocation(part), gather8_args)
    for stride, label in ((128, "128 B"), (4096, "4 KiB"), (2 << 20, "2 MiB")):
        make(f"bare, one allocation, parts {label} apart", kernel, one_allocation(stride), gather8_args)
    make("bare, 8 allocations", kernel, separate, gather8_args)
    for label, purlin_params, switch, cg in STEPS:
        step = cupy.RawKernel(step_kernel(int(per_block), purlin_params, switch, cg), "gather8_step")
        make(label, step, separate, purlin_args if purlin_params else lambda parts, dst: (*pointers(parts), dst))
    if purlin_source is not None:
        options, source, grid = purlin_source
        built = cupy.RawModule(code=source, options=options).get_function("purlin_compiled")
        make("purlin's generated kernel, launched bare", built, separate, purlin_args, grid)
        make("  + an event recorded before each call", built, separate, purlin_args, grid, record=True)
    return cands, outs, (expect, held)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=256, help="the gather's output bytes: 128-1024, a multiple of 128")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    # Each part is whole 16-byte vectors and fits the smallest spacing tried
    # (128 B), so no two parts overlap and one thread copies each vector.
    if not (RANKS * 16 <= args.bytes <= RANKS * 128 and args.bytes % (RANKS * 16) == 0):
        print(f"gather_gap: --bytes must be a multiple of {RANKS * 16} from {RANKS * 16} to {RANKS * 128}", file=sys.stderr)
        return 2
    backend = CupyBackend(RANKS)
    service = MeasurementService(backend)
    (size, inst), = instances(load_builtin("gather"), [args.bytes], RANKS, "float32", 0)
    config = RunConfig.make("push", {"channels": 1, "slice_bytes": 0}, {"kernel": "compiled", "threads": 128, "unroll": 4})
    prepared = service.prepare(inst, config, "float32")
    cands = {"purlin compiled gather": prepared.runner.candidate(), "torch": prepared.reference.baseline("torch")}
    sets = rotation_sets(prepared.program)  # as many as purlin's own gather rotates over
    # The very source purlin's runner built (the same program, blocks and options).
    text = backend.source(prepared.program, **dict(config.exec_params))
    if f"const int B = {prepared.runner.blocks};" not in text:
        print(f"gather_gap: the generated source is not for the runner's {prepared.runner.blocks} blocks a group", file=sys.stderr)
        return 1
    options = options_of(text)
    bare, outs, (expect, _held) = bare_candidates(args.bytes, sets, (options, text, RANKS * prepared.runner.blocks))
    cands.update(bare)
    # The runner's own launch, on a non-blocking stream like the bare kernels'
    # (its candidate uses a blocking one, ordered after the legacy stream).
    import cupy

    runner = prepared.runner
    cands["purlin's runner on a non-blocking stream"] = StreamCandidate(lambda target, i: runner.launch(target, i % sets), cupy.cuda.Stream(non_blocking=True))
    times = backend.time(list(cands.values()), TimingPolicy(iters=args.iters, warmup=2, reps=args.reps))
    wrong = sum(int((d != expect).sum()) for dsts in outs.values() for d in dsts)
    print(f"# gather of {size} B over {RANKS} ranks, float32, {sets} buffer sets each, side by side, median of {args.reps}; purlin #wrong {prepared.nwrong}, bare kernels #wrong {wrong}")
    for name, t in zip(cands, times):
        print(f"{name:45} {t.median_us:7.2f} us")
    return 1 if wrong or prepared.nwrong else 0


if __name__ == "__main__":
    sys.exit(main())
