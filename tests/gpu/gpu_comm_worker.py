"""One rank of the Communicator's exactness check (run under torchrun; see
tests/gpu/test_gpu_comm_procs.py): every collective, float32 and bfloat16, from
16 B to --max-bytes per rank's tensor, eagerly and from a CUDA graph replayed
--replays times with new inputs each replay, then with tensors that are the
Communicator's own buffers (comm.buffers: no copy in or out, the input left
as it was), compared bit for bit with the spec's reference semantics on
integer-valued inputs (exact in any order).

    torchrun --nproc-per-node 8 tests/gpu/gpu_comm_worker.py [--max-bytes 67108864] [--replays 100]

Prints one ``comm-check: ...`` line per rank and exits non-zero on the first
mismatch or error (which it names)."""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.distributed as dist

from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.spec.loader import resolve
from purlin_bench.torch import Communicator
from purlin_bench.torch._setup import count_for

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "gather", "scatter")
ROOT = 1  # not 0: a root other than the store's owner


def inputs_of(r: int, n: int) -> np.ndarray:
    """Rank ``r``'s input, small integers (sums of 8 ranks stay exact in bfloat16)."""
    i = np.arange(n, dtype=np.int64)
    return ((i * 7 + r * 13) % 9 - 4).astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank % torch.cuda.device_count())
    comm = Communicator(max_bytes=args.max_bytes * size, timeout_s=20.0)
    checks, copies = 0, _Copies()
    sizes, b = [], 16
    while b <= args.max_bytes:
        sizes.append(b)
        b *= 16
    try:
        for dtype in args.dtypes.split(","):
            tdtype = getattr(torch, dtype)
            _, npdt = resolve_dtype(dtype)
            for name in COLLECTIVES:
                spec = resolve(name)
                for nbytes in sizes:
                    n = -(-(nbytes // npdt.itemsize) // size) * size
                    inst = count_for(spec, size, rank, ROOT, npdt.itemsize, n, None)
                    ins = [inputs_of(r, inst.in_counts[r]) for r in range(size)]
                    want = inst.reference([x.astype(npdt) for x in ins], "sum" if spec.op == "reduce" else None)[rank]
                    mine = ins[rank] if inst.in_counts[rank] else np.zeros(n)
                    x = torch.from_numpy(mine).to(tdtype).cuda()
                    expect = torch.from_numpy(want.astype(np.float64)).to(tdtype).cuda()
                    call = getattr(comm, name.replace("-", "_"))
                    kwargs = {"root": ROOT} if spec.rooted else {}
                    out = call(x, **kwargs)
                    _same(out, expect, f"{dtype} {name} {nbytes} B eager")
                    checks += 1
                    # From a graph: a new input every replay (x + k on every rank).
                    g = torch.cuda.CUDAGraph()
                    static = x.clone()
                    torch.cuda.synchronize()
                    with torch.cuda.graph(g):
                        gout = call(static, **kwargs)
                    shift = size if spec.op == "reduce" else 1
                    for k in range(args.replays):
                        static.copy_(x + (k % 4))
                        g.replay()
                        if k % max(1, args.replays // 4) == 0 or nbytes <= 1 << 20:
                            _same(gout, expect + shift * (k % 4), f"{dtype} {name} {nbytes} B replay {k}")
                            checks += 1
                    torch.cuda.synchronize()
                    comm.check()
                    del g
                    what = f"{dtype} {name} {nbytes} B"
                    checks += _zero_copy(comm, copies, call, kwargs, name, n, x, expect, shift, what)
        print(f"comm-check: rank {rank} of {size}: {checks} checks exact", flush=True)
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, the rank and what failed
        print(f"comm-check: rank {rank} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        comm.close()


class _Copies:
    """Counts the device copies whose source is their destination: what a
    zero-copy call's copy in and out would be, had they not been left out
    (a program's own copy-engine copies never are). The runner looks
    cupy.cuda.runtime.memcpyAsync up at each call, so it sees this one."""

    def __init__(self):
        import cupy

        self.rt, self.real, self.n = cupy.cuda.runtime, cupy.cuda.runtime.memcpyAsync, 0
        self.rt.memcpyAsync = self

    def __call__(self, dst, src, *args):
        self.n += dst == src
        return self.real(dst, src, *args)


def _zero_copy(comm, copies, call, kwargs, name, n, x, expect, shift, what) -> int:
    """The same case through comm.buffers: a graph captured before any eager
    call with them (buffers() prepared it), then eager calls that must make
    no device copy; the input comes back unchanged every time."""
    zx, zy = comm.buffers(name, n, x.dtype, **kwargs)
    if zx.numel() not in (0, n) or zy.numel() != expect.numel():
        raise AssertionError(f"{what} zero-copy: buffers of {zx.numel()} and {zy.numel()} elements")
    feeds = zx.numel() > 0  # broadcast's and scatter's non-roots have no input: their empty x is passed as is
    if feeds:
        zx.copy_(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = call(zx, out=zy, **kwargs)
    if got is not zy:
        raise AssertionError(f"{what} zero-copy: the call returned a new tensor, not out")
    checks = 0
    for k in range(4):
        if feeds:
            zx.copy_(x + k)
        g.replay()
        _same(zy, expect + shift * k, f"{what} zero-copy replay {k}")
        if feeds:
            _same(zx, x + k, f"{what} zero-copy replay {k}: the input")
        checks += 1
    del g
    if feeds:
        zx.copy_(x)
    before = copies.n
    call(zx, out=zy, **kwargs)
    made = copies.n - before
    torch.cuda.synchronize()
    if made:
        raise AssertionError(f"{what} zero-copy: an eager call copied a buffer onto itself {made} times")
    _same(zy, expect, f"{what} zero-copy eager")
    if feeds:
        _same(zx, x, f"{what} zero-copy eager: the input")
    # An ordinary call of the same collective and size goes through the same
    # buffers: it copies its own input over x (documented), and out gets its result.
    other = call(x + 1, **kwargs)
    _same(other, expect + shift, f"{what} an ordinary call after zero-copy ones")
    comm.check()
    return checks + 2


def _same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if got.shape != want.shape or not torch.equal(got, want):
        bad = int((got != want).sum()) if got.shape == want.shape else -1
        raise AssertionError(f"{what}: {bad} of {want.numel()} elements differ")


if __name__ == "__main__":
    sys.exit(main())
