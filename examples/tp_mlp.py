"""A tensor-parallel MLP block with purlin's all-reduce, checked against
torch.distributed, eagerly and replayed from a CUDA graph.

    torchrun --nproc-per-node 2 examples/tp_mlp.py [--dtype bfloat16] [--tokens 8] [--replays 100]

The block is the one every TP serving stack runs (Megatron-style): hidden
size H, intermediate 4H split across N ranks; a column-parallel linear (this
rank's slice of W1's columns), GELU, a row-parallel linear (this rank's rows
of W2), whose partial sums are all-reduced. Every rank holds the same seeded
weights and gets the same tokens.

Checks: the eager output against torch.distributed.all_reduce of the same
partial sums (a tolerance for the dtype: reduction orders may differ); the
all-reduce alone, bit for bit, on integer-valued inputs (exact in any order),
eagerly and from a graph; then the whole block (both matmuls and purlin's
all-reduce) captured in one torch.cuda.CUDAGraph and replayed --replays times
with fresh tokens copied into its static input, each compared with the
torch.distributed path. Exits non-zero on any mismatch.

NCCL refuses two ranks on one GPU: with fewer GPUs than ranks the reference
runs over gloo (an all-reduce of a CPU copy), and the ranks time-slice the GPU
(so purlin's times there say little of its speed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from purlin_bench.torch import Communicator

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(TOLERANCE))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--timing-reps", type=int, default=11)
    ap.add_argument("--timing-iters", type=int, default=20)
    return ap.parse_args()


class Reference:
    """torch.distributed's all-reduce: NCCL on the GPU, or gloo on a CPU copy."""

    def __init__(self, nccl: bool):
        self.nccl = nccl

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.nccl:
            out = t.clone()
            dist.all_reduce(out)
            return out
        host = t.float().cpu()
        dist.all_reduce(host)
        return host.to(device=t.device, dtype=t.dtype)

    def agree(self, ok: bool, device) -> bool:
        """Whether every rank is ok."""
        flag = torch.tensor([0 if ok else 1], dtype=torch.int32, device=device if self.nccl else "cpu")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item()) == 0


class TPMLP:
    def __init__(self, hidden: int, ranks: int, rank: int, dtype, device):
        inter = 4 * hidden
        if inter % ranks:
            raise SystemExit(f"intermediate size {inter} does not split across {ranks} ranks")
        shard = inter // ranks
        gen = torch.Generator().manual_seed(0)  # the same full weights on every rank
        w1 = torch.randn(hidden, inter, generator=gen) / hidden**0.5
        w2 = torch.randn(inter, hidden, generator=gen) / inter**0.5
        cols = slice(rank * shard, (rank + 1) * shard)
        self.w1 = w1[:, cols].contiguous().to(device=device, dtype=dtype)  # column-parallel
        self.w2 = w2[cols, :].contiguous().to(device=device, dtype=dtype)  # row-parallel

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's partial sums of the block's output (before the all-reduce)."""
        return (torch.nn.functional.gelu(x @ self.w1) @ self.w2).reshape(-1)


def tokens(step: int, n: int, hidden: int, dtype, device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(1000 + step)  # the same on every rank
    return torch.randn(n, hidden, generator=gen, device=device).to(dtype)


def integers(step: int, rank: int, n: int, dtype, device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(7919 * step + rank)  # differ per rank
    return torch.randint(-8, 9, (n,), generator=gen, device=device).to(dtype)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max().item())


def median_us(fn, reps: int, iters: int, barrier) -> float:
    samples = []
    for _ in range(reps):
        barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / iters)
    return statistics.median(samples)


def median_wall_us(fn, reps: int, iters: int, barrier) -> float:
    samples = []
    for _ in range(reps):
        barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6 / iters)
    return statistics.median(samples)


def main() -> int:
    args = parse()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(local_rank % gpus)
    device = torch.device("cuda", torch.cuda.current_device())
    nccl = gpus >= world
    dist.init_process_group("nccl" if nccl else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)
    tol = TOLERANCE[args.dtype]
    ref = Reference(nccl)
    problems: list[str] = []

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    if not nccl:
        say(f"tp_mlp: {size} ranks on {gpus} GPU(s): NCCL refuses two ranks on one GPU, so the reference all-reduce runs over gloo on CPU copies")
    comm = Communicator(max_bytes=64 << 20)
    mlp = TPMLP(args.hidden, size, rank, dtype, device)
    n = args.tokens * args.hidden

    def tp_all_reduce(p: torch.Tensor) -> torch.Tensor:
        # The dispatch a serving stack writes: purlin where it takes the tensor, else NCCL.
        if comm.should_use(p):
            return comm.all_reduce(p)
        return ref.all_reduce(p)

    probe = torch.empty(n, dtype=dtype, device=device)
    if not comm.should_use(probe):
        problems.append(f"should_use refused a {n}-element {args.dtype} all-reduce")

    # -- eager: the block, and the all-reduce alone on exact inputs ------------
    x = tokens(0, args.tokens, args.hidden, dtype, device)
    p = mlp.partial(x)
    y = tp_all_reduce(p)
    want = ref.all_reduce(p)
    worst = max_diff(y, want)
    if not torch.allclose(y.float(), want.float(), rtol=tol, atol=tol):
        problems.append(f"eager block output differs from torch.distributed (max abs diff {worst:g})")
    exact = integers(0, rank, n, dtype, device)
    if not torch.equal(comm.all_reduce(exact), ref.all_reduce(exact)):
        problems.append("eager all-reduce of integer-valued inputs is not bit-exact")

    # -- CUDA graphs -------------------------------------------------------------
    static_x = x.clone()
    static_int = exact.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch asks before capture
        for _ in range(3):
            comm.all_reduce(mlp.partial(static_x))
            comm.all_reduce(static_int)
    torch.cuda.current_stream().wait_stream(side)
    block_graph, exact_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(block_graph):
        static_y = comm.all_reduce(mlp.partial(static_x))
    with torch.cuda.graph(exact_graph):
        static_sum = comm.all_reduce(static_int)
    bad_replays = 0
    for step in range(1, args.replays + 1):
        fresh = tokens(step, args.tokens, args.hidden, dtype, device)
        static_x.copy_(fresh)
        block_graph.replay()
        want = ref.all_reduce(mlp.partial(fresh))
        worst = max(worst, max_diff(static_y, want))
        if not torch.allclose(static_y.float(), want.float(), rtol=tol, atol=tol):
            bad_replays += 1
        if step <= 10:
            ints = integers(step, rank, n, dtype, device)
            static_int.copy_(ints)
            exact_graph.replay()
            if not torch.equal(static_sum, ref.all_reduce(ints)):
                problems.append(f"graph replay {step}: all-reduce of integer-valued inputs is not bit-exact")
    if bad_replays:
        problems.append(f"{bad_replays} of {args.replays} graph replays differ from torch.distributed beyond rtol=atol={tol:g}")

    # -- timing: the block's message, eager calls ---------------------------------
    barrier = dist.barrier
    msg = p.numel() * p.element_size()
    ours = median_us(lambda: comm.all_reduce(p), args.timing_reps, args.timing_iters, barrier)
    if nccl:
        scratch = p.clone()  # reduced in place over and over: the values do not matter here
        theirs = median_us(lambda: dist.all_reduce(scratch), args.timing_reps, args.timing_iters, barrier)
        how = "NCCL, CUDA events"
    else:
        theirs = median_wall_us(lambda: ref.all_reduce(p), args.timing_reps, args.timing_iters, barrier)
        how = "gloo on CPU copies, wall clock"
    shared = " (ranks time-sliced on one GPU: these times are not purlin's speed)" if gpus < size else ""
    say(f"tp_mlp: all-reduce of {msg} bytes, median of {args.timing_reps} x {args.timing_iters} calls: purlin {ours:.1f} us, torch.distributed {theirs:.1f} us ({how}){shared}")

    comm.check()  # no call timed out (a watchdog), on this rank
    ok = ref.agree(not problems, device)
    for text in problems:
        print(f"tp_mlp: rank {rank}: {text}", file=sys.stderr, flush=True)
    if ok:
        say(f"tp_mlp: {size} ranks, {args.dtype}, eager ok, {args.replays} graph replays ok, max abs diff {worst:.3g}")
    else:
        say("tp_mlp: MISMATCH (see the messages above)")
    comm.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
