"""Host time per eager call of the Communicator against x.add(1), and its time
per call replayed from a CUDA graph, in the same processes (issue 30).

    torchrun --nproc-per-node N lab/issue30/comm_host.py [--bytes 16] [--calls 2000] [--zero-copy]

--zero-copy: x and out are the Communicator's own buffers (comm.buffers), so
a call is one launch with no copy in or out.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from purlin_bench.torch import Communicator


def host_us(fn, calls: int, batch: int = 64) -> float:
    """Median host time a call over batches of ``batch`` calls, the GPU drained
    between batches: a batch stays far below the launch queue's depth, so a
    kernel slower than its launch cannot block the host and count as host cost
    (2000 calls back to back did, at 8 processes)."""
    times = []
    for _ in range(max(1, calls // batch)):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - start) / batch * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=16)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--zero-copy", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    comm = Communicator()
    n = max(size, args.bytes // 4)
    if args.zero_copy:
        x, out = comm.buffers("all-reduce", n, torch.float32)
        x.fill_(1)
    else:
        x = torch.ones(n, device="cuda")
        out = torch.empty_like(x)
    for _ in range(20):
        comm.all_reduce(x, out=out)
    rows = {}
    for rep in range(3):
        dist.barrier()
        rows.setdefault("comm", []).append(host_us(lambda: comm.all_reduce(x, out=out), args.calls))
        dist.barrier()
        rows.setdefault("add", []).append(host_us(lambda: x.add(1), args.calls))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            comm.all_reduce(x, out=out)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / 100)
    comm.check()
    c, d = statistics.median(rows["comm"]), statistics.median(rows["add"])
    how = "zero-copy" if args.zero_copy else "copies"
    print(f"comm-host: rank {rank} of {size}, {n * 4} B, {how}: eager all_reduce {c:.1f} us host a call, "
          f"x.add(1) {d:.1f} us ({c / d:.2f}x); graph {statistics.median(times):.2f} us a call", flush=True)
    comm.close()


if __name__ == "__main__":
    main()
