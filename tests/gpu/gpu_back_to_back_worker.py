"""One rank of the back-to-back check (run under torchrun; see
tests/gpu/test_gpu_comm_procs.py): --calls calls each of all-reduce and
reduce-scatter, alternating, captured in one CUDA graph, each on an input
the stream changed just before it (x += 1) and into an output of its own,
replayed with no host sync between the calls, so a rank runs into the next
call while its peers finish this one: what push-parity's scratch halves (no
ready/done flags, scratch of each runner's own) must survive.
Each strategy is forced on rank 0, whose configuration every rank runs.

    torchrun --nproc-per-node 8 tests/gpu/gpu_back_to_back_worker.py [--calls 64] [--strategies auto,push-parity]

Prints one ``b2b-check: ...`` line per rank; non-zero on the first mismatch."""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.distributed as dist

from purlin_bench.base.config import RunConfig
from purlin_bench.spec.loader import resolve
from purlin_bench.torch import Communicator
from purlin_bench.torch._setup import count_for
from tests.gpu.gpu_comm_worker import _same, inputs_of

COLLECTIVES = {"all-reduce": "all_reduce", "reduce-scatter": "reduce_scatter"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--strategies", default="auto,push-parity")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank % torch.cuda.device_count())
    checks = 0
    try:
        for strategy in args.strategies.split(","):
            comm = Communicator(timeout_s=20.0)
            try:
                if rank == 0 and strategy != "auto":
                    backend = comm.backend
                    comm._configs.config = lambda inst, dtype, s=strategy: backend.default_config(
                        inst, RunConfig.make(s, {"channels": 1, "slice_bytes": 0})
                    )
                for nbytes in (16, 4096, 1 << 20):
                    checks += _back_to_back(comm, nbytes, args.calls, size, rank)
                comm.check()
            finally:
                comm.close()
            print(f"b2b-check: rank {rank} of {size}: {strategy} exact", flush=True)
        print(f"b2b-check: rank {rank} of {size}: {checks} checks exact", flush=True)
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, the rank and what failed
        print(f"b2b-check: rank {rank} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return 1


def _back_to_back(comm, nbytes: int, calls: int, size: int, rank: int) -> int:
    """all-reduce and reduce-scatter alternating in one graph: two runners
    whose calls interleave on one stream, as a serving stack's layers do."""
    n = -(-(nbytes // 4) // size) * size
    ins = [inputs_of(r, n) for r in range(size)]
    x = torch.from_numpy(ins[rank]).to(torch.float32).cuda()
    start = x.clone()
    cases = []
    for name, method in COLLECTIVES.items():
        inst = count_for(resolve(name), size, rank, 0, 4, n, None)
        outs = [torch.empty(inst.out_counts[rank], dtype=torch.float32, device="cuda") for _ in range(calls)]
        getattr(comm, method)(x, out=outs[0])  # prepared eagerly, before capture
        cases.append((name, inst, getattr(comm, method), outs))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            x.add_(1)
            for _, _, call, outs in cases:
                call(x, out=outs[i])
    checks = 0
    for replay in range(2):  # the second replay goes on from the epochs the first left
        x.copy_(start)
        g.replay()
        torch.cuda.synchronize()
        for name, inst, _, outs in cases:
            for i, out in enumerate(outs):
                shifted = [(v + (i + 1)).astype(np.float32) for v in ins]
                want = torch.from_numpy(inst.reference(shifted, "sum")[rank].astype(np.float32)).cuda()
                _same(out, want, f"{name} {nbytes} B replay {replay} call {i}")
                checks += 1
    del g
    return checks


if __name__ == "__main__":
    sys.exit(main())
