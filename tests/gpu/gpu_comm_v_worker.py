"""One rank of the Communicator's variable-size check (run under torchrun;
see tests/gpu/test_gpu_comm_procs.py): all_gather_v, reduce_scatter_v and
all_to_all_v in float32 and bfloat16, counts drawn on every rank alike
(uniform, skewed, hot, sparse, zeros), eagerly and from a CUDA graph whose
counts tensor is rewritten on the GPU before each replay (then the same with
the communicator's own buffers, comm.buffers: no copy), compared bit for
bit with the spec's reference semantics (each output's part the call fills).

    torchrun --nproc-per-node 8 tests/gpu/gpu_comm_v_worker.py [--capacity 4096] [--replays 8]

Prints one ``comm-v-check: ...`` line per rank; non-zero on the first mismatch."""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.distributed as dist

from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import CountsError
from purlin_bench.spec.instance import instantiate
from purlin_bench.spec.loader import resolve
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts, expected_outputs
from purlin_bench.torch import Communicator

CALLS = {"all-gather-v": "all_gather_v", "reduce-scatter-v": "reduce_scatter_v", "all-to-all-v": "all_to_all_v"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--replays", type=int, default=8)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank % torch.cuda.device_count())
    comm = Communicator(max_bytes=64 << 20, timeout_s=20.0)
    rng = np.random.default_rng(11)  # the same draws on every rank: the counts are the call's
    checks = 0
    try:
        for dtype in ("float32", "bfloat16"):
            _, npdt = resolve_dtype(dtype)
            for name, method in CALLS.items():
                spec = resolve(name)
                redop = "sum" if spec.op == "reduce" else None
                inst = instantiate(spec, size, args.capacity, npdt.itemsize)
                ins = [((np.arange(n) * 7 + r * 13) % 9 - 4).astype(npdt) for r, n in enumerate(inst.in_counts)]
                x = torch.from_numpy(ins[rank].astype(np.float64)).to(getattr(torch, dtype)).cuda()
                call = getattr(comm, method)
                draws = [(0,) * len(inst.count_keys)] + [draw_counts(inst, d, rng) for d in DISTRIBUTIONS]
                for counts in draws:
                    out = call(x, torch.tensor(counts, dtype=torch.int64, device="cuda"))
                    _same(out, inst, ins, redop, counts, rank, f"{dtype} {name} {counts[:4]} eager")
                    checks += 1
                # From a graph: the counts tensor rewritten on the GPU before each replay.
                device_counts = torch.zeros(len(inst.count_keys), dtype=torch.int64, device="cuda")
                g = torch.cuda.CUDAGraph()
                torch.cuda.synchronize()
                with torch.cuda.graph(g):
                    gout = call(x, device_counts)
                for k in range(args.replays):
                    counts = draw_counts(inst, DISTRIBUTIONS[k % len(DISTRIBUTIONS)], rng)
                    device_counts.copy_(torch.tensor(counts, dtype=torch.int64), non_blocking=False)
                    g.replay()
                    _same(gout, inst, ins, redop, counts, rank, f"{dtype} {name} replay {k}")
                    checks += 1
                # Zero-copy: the same through the communicator's own buffers, from a graph.
                zx, zy = comm.buffers(name, x.numel(), x.dtype)
                zx.copy_(x)
                g = torch.cuda.CUDAGraph()
                torch.cuda.synchronize()
                with torch.cuda.graph(g):
                    call(zx, device_counts, out=zy)
                for k in range(args.replays):
                    counts = draw_counts(inst, DISTRIBUTIONS[k % len(DISTRIBUTIONS)], rng)
                    device_counts.copy_(torch.tensor(counts, dtype=torch.int64), non_blocking=False)
                    g.replay()
                    _same(zy, inst, ins, redop, counts, rank, f"{dtype} {name} zero-copy replay {k}")
                    if not torch.equal(zx, x):
                        raise AssertionError(f"{dtype} {name} zero-copy replay {k}: the call changed its input")
                    checks += 1
        # A count past the capacity, written by "a routing kernel": clamped on the GPU, raised at the next call.
        inst = instantiate(resolve("all-to-all-v"), size, args.capacity, 4)
        x = torch.zeros(inst.in_counts[rank], dtype=torch.float32, device="cuda")
        bad = torch.full((size * size,), args.capacity + 1, dtype=torch.int64, device="cuda")
        comm.all_to_all_v(x, bad)
        torch.cuda.synchronize()
        try:
            comm.all_to_all_v(x, bad)
            raise AssertionError("a count past its capacity was not raised")
        except CountsError as exc:
            assert "outside 0.." in str(exc), exc
        # ... and the communicator goes on: the flags of a clamped call are sound.
        good = draw_counts(inst, "uniform", rng)
        out = comm.all_to_all_v(x, torch.tensor(good, dtype=torch.int64, device="cuda"))
        _same(out, inst, [np.zeros(n, np.float32) for n in inst.in_counts], None, good, rank, "after a bad count")
        checks += 1
    except Exception as exc:  # noqa: BLE001 - reported with the rank, as the exit status says
        print(
            f"comm-v-check: rank {rank} of {size}: FAILED after {checks} checks: {type(exc).__name__}: {exc}",
            flush=True,
        )
        return 1
    print(f"comm-v-check: rank {rank} of {size}: {checks} checks exact", flush=True)
    dist.barrier()
    return 0


def _same(out, inst, ins, redop, counts, rank, what) -> None:
    torch.cuda.synchronize()
    want = expected_outputs(inst, ins, redop, counts)[rank]
    got = out[: len(want)].float().cpu().numpy()
    if not np.array_equal(got, want.astype(np.float32)):
        bad = int(np.count_nonzero(got != want.astype(np.float32)))
        raise AssertionError(f"{what}: {bad} of {len(want)} elements wrong on rank {rank}")


if __name__ == "__main__":
    sys.exit(main())
