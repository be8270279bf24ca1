"""Time chosen configurations beside the CuPy baseline and the copy floor of
the same run: the experiments behind the heuristics (lab/notebook/performance-history.md,
"Datapath survey"). Every row is checked (#wrong) before it is timed.

    python3 lab/scripts/datapath_survey.py [--set NAME ...] [--case CASE ...] [--json FILE]

CASE is ``collective:dtype:size,size,..:strategy[:key=value,...]``, e.g.
``all-to-all:float32:256M,1G:push:datapath=ce``; keys are the planner's
(channels, slice_bytes) and the executor's (blocks, threads, datapath, unroll).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.runtime.runner import KernelSettings
from purlin_bench.backends.port import TimingPolicy
from purlin_bench.tools.bench.measure import BenchOptions, Measurer
from purlin_bench.tools.bench.run import instances
from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import PurlinError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.base.sizes import parse_bytes
from purlin_bench.spec import load_builtin

PLAN_KEYS = ("channels", "slice_bytes")
BIG = "256M,1G"

SETS = {
    # Large messages: where the floor and CuPy targets were missed.
    "large": [
        f"all-to-all:float32:{BIG}:push", f"all-to-all:float32:{BIG}:push:datapath=ce", f"all-to-all:float32:{BIG}:push:unroll=4",
        f"gather:float32:{BIG}:push", f"gather:float32:{BIG}:push:datapath=ce", f"gather:float32:{BIG}:push:unroll=4",
        f"scatter:float32:{BIG}:direct", f"scatter:float32:{BIG}:direct:datapath=ce", f"scatter:float32:{BIG}:push:datapath=ce",
        f"scatter:float32:{BIG}:direct:unroll=4",
        f"broadcast:float32:{BIG}:direct", f"broadcast:float32:{BIG}:two-shot", f"broadcast:float32:{BIG}:two-shot:unroll=4",
        f"broadcast:float32:{BIG}:push:datapath=ce",
        f"all-gather:float32:{BIG}:push", f"all-gather:float32:{BIG}:push:unroll=4", f"all-gather:float32:{BIG}:two-shot",
        f"all-reduce:float32:{BIG}:two-shot", f"all-reduce:float32:{BIG}:two-shot:unroll=1", f"all-reduce:float32:{BIG}:two-shot:unroll=4",
        f"reduce-scatter:float32:{BIG}:direct", f"reduce-scatter:float32:{BIG}:direct:unroll=1", f"reduce-scatter:float32:{BIG}:direct:unroll=4",
        f"reduce:float32:{BIG}:two-shot", f"reduce:float32:{BIG}:two-shot:unroll=4", f"reduce:float32:{BIG}:direct",
        "all-reduce:bfloat16:256M:two-shot", "all-reduce:bfloat16:256M:two-shot:unroll=4",
        "reduce-scatter:bfloat16:256M:direct", "reduce-scatter:bfloat16:256M:direct:unroll=4",
    ],
    # Fan-outs at 85-87% of the floor (issue 16): the strategies and unrolls
    # a default could take at 256 MiB, with all-to-all (one
    # consumer a flow, at 93-105%) as the control (lab/scripts/fanout_probe.py
    # measures the write rate these are bound by).
    "fanout": [
        f"{c}:float32:256M:{st}{x}"
        for c, st in (("all-gather", "push"), ("all-gather", "two-shot"), ("broadcast", "direct"), ("broadcast", "two-shot"), ("all-to-all", "push"))
        for x in ("", ":unroll=4", ":channels=2")
    ],
    # The fan-outs' block count and block size at 256 MiB (the default's
    # strategies, unroll 4; all-to-all the control), after the write rate and
    # the store hints were ruled out (lab/perf/issue16/NOTES.md), and a
    # copy-engine fan-out (a copy per destination: it reads the source once
    # per destination, so it pays only if the copy engines write faster).
    "fanout-blocks": [
        f"{c}:float32:256M:{st}:unroll=4{x}"
        for c, st in (("all-gather", "push"), ("broadcast", "two-shot"), ("all-to-all", "push"))
        for x in ("", ",blocks=4", ",blocks=8", ",blocks=32", ",threads=256", ",datapath=ce")
    ],
    # Where the compiled kernel lost to torch on 2026-12-03 (run with
    # --baseline torch): gather and scatter at every size (0.84-0.98x; torch
    # does them as one copy kernel), the block count and size and the copy
    # engines below their 4 MiB-a-flow threshold; all-to-all at 16-32 B
    # (0.89x), where the default gives each flow a channel (64 groups of
    # blocks), which paid in the interpreter's chains of ops.
    "torch-gaps": [
        f"{c}:float32:256,64K,1M,16M:{st}:unroll=4{x}"
        for c, st in (("gather", "push"), ("scatter", "direct"))
        for x in ("", ",kernel=compiled", ",kernel=compiled,blocks=1", ",kernel=compiled,blocks=32", ",kernel=compiled,threads=256", ",datapath=ce")
    ] + [
        f"all-to-all:float32:16,256,4K,64K:push:unroll=4,kernel=compiled,threads=128,channels={ch}" for ch in (1, 2, 8)
    ],
    # Small and mid messages: latency of the candidates for the defaults.
    "small": [
        "broadcast:float32:8,1K,64K,1M,16M:direct", "broadcast:float32:8,1K,64K,1M,16M:two-shot",
        "all-to-all:float32:64K,1M,16M:push", "all-to-all:float32:1M,16M:push:datapath=ce",
        "gather:float32:64K,1M,16M:push", "gather:float32:1M,16M:push:datapath=ce",
        "scatter:float32:64K,1M,16M:direct", "scatter:float32:1M,16M:direct:datapath=ce",
        "all-reduce:float32:8,64K,1M,16M:two-shot", "reduce-scatter:float32:8,64K,1M,16M:direct",
    ],
    # Mid sizes: how many blocks the automatic count gives (run with --auto-block-bytes).
    "mid": [
        f"{c}:float32:4K,64K,1M,16M:{st}{x}"
        for c, st in (("all-to-all", "push"), ("gather", "push"), ("scatter", "direct"), ("all-gather", "push"), ("broadcast", "two-shot"), ("all-reduce", "two-shot"), ("reduce-scatter", "direct"))
        for x in ("", ":unroll=4")
    ],
    # Where the copy engines start to pay, per flow size.
    "ce": [
        "all-to-all:float32:16M,64M:push", "all-to-all:float32:16M,64M:push:datapath=ce", "all-to-all:float32:64K,1M,16M:push:channels=8",
        "gather:float32:4M,64M:push", "gather:float32:4M,64M:push:datapath=ce",
        "scatter:float32:4M,64M:direct", "scatter:float32:4M,64M:push:datapath=ce",
    ],
    # Latency: the defaults and the tuned plans' 64 KiB pick (copy engines), beside --launch-floor.
    "latency": [
        f"{c}:float32:16,4K,64K:{st}{x}"
        for c, st in (("all-reduce", "two-shot"), ("all-gather", "push:unroll=4"), ("reduce-scatter", "direct"), ("all-to-all", "push:channels=8,unroll=4"))
        for x in ("", ",datapath=ce" if ":" in st else ":datapath=ce")
    ],
    # The compiled datapath at the defaults' strategies (copies at unroll 4, as
    # CupyBackend.default_config gives them), at 512 and at 128 threads a block.
    "compiled-small": [
        f"{c}:{d}:8,4K,64K,1M:{st}:{x}kernel=compiled{t}"
        for c, st, x in (
            ("all-reduce", "two-shot", ""), ("reduce-scatter", "direct", ""), ("reduce", "two-shot", ""),
            ("all-gather", "push", "unroll=4,"), ("all-to-all", "push", "unroll=4,"), ("broadcast", "two-shot", "unroll=4,"),
            ("gather", "push", "unroll=4,"), ("scatter", "direct", "unroll=4,"),
        )
        for d in ("float32", "bfloat16") if d == "float32" or c == "all-reduce"
        for t in ("", ",threads=128")
    ],
}


def parse_case(text: str):
    parts = text.split(":")
    if len(parts) not in (4, 5):
        raise PurlinError(f"case '{text}': want collective:dtype:sizes:strategy[:k=v,...]")
    name, dtype, sizes, strategy = parts[:4]
    plan_params, exec_params = {}, {}
    for item in filter(None, (parts[4] if len(parts) == 5 else "").split(",")):
        key, _, value = item.partition("=")
        value = int(value) if value.isdigit() else value
        (plan_params if key in PLAN_KEYS else exec_params)[key] = value
    return name, dtype, [parse_bytes(s, "size") for s in sizes.split(",")], RunConfig.make(strategy, plan_params, exec_params)


def launch_floor(iters: int, reps: int) -> dict[str, float]:
    """Microseconds per call of kernels that do nothing, replayed from a CUDA
    graph the way the benchmark replays collectives: what no configuration
    of a one-launch collective can beat at small sizes. Also the shape of
    the compiled gather and scatter of 8 ranks (8 blocks of 128 threads, 36
    pointer parameters: 24 buffers, 8 flag words, epochs, status, abort, a
    timeout), which take 0.1-0.25 us longer than torch's one copy kernel."""
    import cupy

    from purlin_bench.backends.cupy.runtime.timing import time_calls

    nop = cupy.RawKernel('extern "C" __global__ void nop(int* p) { if (p && threadIdx.x == 1024) p[0] = 0; }', "nop")
    params = ", ".join(f"char* b{i}" for i in range(35))
    wide = cupy.RawKernel(f'extern "C" __global__ void wide(int* p, {params}) {{ if (p && threadIdx.x == 1024) p[0] = 0; }}', "wide")
    stream = cupy.cuda.Stream(non_blocking=True)
    floor = {}
    for grid, threads in ((1, 32), (1, 128), (8, 128), (8, 512), (132, 512)):
        enqueue = lambda s, i, g=grid, t=threads: nop((g,), (t,), (0,), stream=s)  # noqa: E731
        floor[f"empty kernel {grid}x{threads}"] = time_calls(enqueue, stream, 0, iters, 2, reps, graph=True).median_us
    for grid in (1, 8):
        enqueue = lambda s, i, g=grid: wide((g,), (128,), (0,) * 36, stream=s)  # noqa: E731
        floor[f"empty kernel {grid}x128, 36 pointer parameters"] = time_calls(enqueue, stream, 0, iters, 2, reps, graph=True).median_us
    floor.update(small_copy_floor(iters, reps, stream))
    return floor


def small_copy_floor(iters: int, reps: int, stream, nbytes: int = 256) -> dict[str, float]:
    """A 256-byte gather's floor, from a graph: one memcpy node (torch's
    gather and scatter: its stacked ranks are one contiguous copy), the
    smallest copy kernels (one block of 32 threads; 8 blocks of 128, two
    vectors each, the compiled gather's shape) from one allocation, the same
    8-block kernel reading 8 separate allocations (rank buffers), and 8
    memcpy nodes on parallel branches (a copy-engine gather of 8 buffers):
    what of the compiled gather's 0.2-0.3 us over torch any kernel pays,
    what separate buffers cost, and what is purlin's own. Timed alone, on
    fixed buffers (no rotation over buffer sets, unlike the service's rows)."""
    import cupy

    from purlin_bench.backends.cupy.runtime.timing import time_calls

    copy = cupy.RawKernel(
        'extern "C" __global__ void copyv(const uint4* a, uint4* b, int per_block) {'
        " int i = blockIdx.x * per_block + threadIdx.x; if (threadIdx.x < per_block) b[i] = a[i]; }",
        "copyv",
    )
    src, dst = cupy.arange(nbytes // 4, dtype=cupy.float32), cupy.zeros(nbytes // 4, dtype=cupy.float32)
    vecs = nbytes // 16
    d2d = cupy.cuda.runtime.memcpyDeviceToDevice
    out = {}

    def memcpy(s, i):
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, d2d, s.ptr)

    out[f"memcpy node, {nbytes} B"] = time_calls(memcpy, stream, 0, iters, 2, reps, graph=True).median_us
    for grid, threads in ((1, 32), (8, 128)):
        dst.fill(0)  # so that each check sees this kernel's copy alone
        enqueue = lambda s, i, g=grid, t=threads: copy((g,), (t,), (src, dst, np.int32(vecs // g)), stream=s)  # noqa: E731
        out[f"copy kernel {grid}x{threads}, {nbytes} B"] = time_calls(enqueue, stream, 0, iters, 2, reps, graph=True).median_us
        assert bool((dst == src).all()), f"the floor's {grid}x{threads} copy kernel copied wrong"
    # The gather's own shape with nothing else of purlin's: 8 blocks, each
    # copying its part from a separate allocation (a rank's buffer) into one.
    from gather_gap import KERNEL as GATHER8  # the same bare kernel gather_gap.py times in one harness

    gather8 = cupy.RawKernel(GATHER8, "gather8")
    parts = [src[k * (nbytes // 32) : (k + 1) * (nbytes // 32)].copy() for k in range(8)]  # 8 allocations
    dst.fill(0)
    enqueue = lambda s, i: gather8((8,), (128,), (*parts, dst, np.int32(vecs // 8)), stream=s)  # noqa: E731
    out[f"copy kernel 8x128 from 8 allocations, {nbytes} B"] = time_calls(enqueue, stream, 0, iters, 2, reps, graph=True).median_us
    assert bool((dst == src).all()), "the floor's 8-source copy kernel copied wrong"
    sides = [cupy.cuda.Stream(non_blocking=True) for _ in range(8)]
    part = nbytes // 8

    # Events made before any capture: a capture records them, never creates them.
    fork, joins = cupy.cuda.Event(disable_timing=True), [cupy.cuda.Event(disable_timing=True) for _ in sides]

    def fanned(s, i):  # fork onto 8 streams and join: 8 memcpy nodes side by side in the graph
        fork.record(s)
        for k, (side, join) in enumerate(zip(sides, joins)):
            side.wait_event(fork)
            cupy.cuda.runtime.memcpyAsync(dst.data.ptr + k * part, src.data.ptr + k * part, part, d2d, side.ptr)
            join.record(side)
            s.wait_event(join)

    out[f"8 parallel memcpy nodes, {part} B each"] = time_calls(fanned, stream, 0, iters, 2, reps, graph=True).median_us
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], choices=sorted(SETS))
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--auto-block-bytes", type=int, default=0, help="bytes per block of the automatic block count")
    ap.add_argument("--launch-floor", action="store_true", help="also time empty kernels from a graph (the small-size floor)")
    ap.add_argument("--baseline", default="cupy", help="the baseline timed beside every row (cupy, torch)")
    ap.add_argument("--json")
    args = ap.parse_args()
    settings = KernelSettings(**({"auto_block_bytes": args.auto_block_bytes} if args.auto_block_bytes else {}))
    cases = [parse_case(c) for s in args.set for c in SETS[s]] + [parse_case(c) for c in args.case]
    backend = CupyBackend(args.ranks, settings=settings)
    bandwidth = backend.copy_bandwidth()
    print(f"# copy bandwidth {bandwidth.bytes_per_s / 1e12:.3f} TB/s; settings {settings}; auto block bytes {args.auto_block_bytes or 'default'}", flush=True)
    if args.launch_floor:
        for what, us in launch_floor(args.iters, args.reps).items():
            print(f"# {what}: {us:.2f} us per call (graph replay)", flush=True)
    measurer = Measurer(MeasurementService(backend), BenchOptions(TimingPolicy(iters=args.iters, warmup=2, reps=args.reps), inplace=False, baselines=(args.baseline,)), bandwidth)
    rows = []
    print(f"{'collective':15} {'dtype':9} {'size':>11} {'config':50} {'us':>10} {args.baseline + ' us':>10} {'x ' + args.baseline:>7} {'%floor':>7} {'wrong':>5}", flush=True)
    for name, dtype, sizes, config in cases:
        spec = load_builtin(name)
        for size, inst in instances(spec, sizes, args.ranks, dtype, 0):
            t0 = time.time()
            try:
                rec = measurer.measure(inst, config, dtype, None)
            except PurlinError as exc:
                print(f"{name:15} {dtype:9} {size:>11} {config.text():50} error: {exc}", flush=True)
                rows.append({"collective": name, "dtype": dtype, "size": size, "config": config.to_dict(), "error": str(exc)})
                continue
            base = rec.baselines.get(args.baseline)
            pct = rec.roofline_pct()
            print(f"{name:15} {dtype:9} {size:>11} {config.text():50} {rec.out_of_place.time_us:10.2f} {base or 0:10.2f} {rec.speedup(args.baseline) or 0:7.2f} {pct or 0:7.1f} {rec.out_of_place.nwrong:5}  ({time.time() - t0:.1f} s)", flush=True)
            rows.append({**rec.to_dict(), "settings": repr(settings)})
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(rows, fh, indent=1)
    return 1 if any(r.get("out_of_place", {}).get("nwrong") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
