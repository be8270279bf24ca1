"""NCCL through ``cupy.cuda.nccl`` as the baseline on several GPUs.

NCCL has one entry point per collective, so this baseline does know names:
it maps each built-in collective to the grouped NCCL calls a user would make
(all-to-all, gather and scatter as grouped send/recv, as nccl-tests does). A
user's own YAML collective has no NCCL equivalent and gets no NCCL baseline.

:func:`nccl_calls` is pure: it lists, per rank, the NCCL method and its
arguments with buffers named symbolically as (rank, "in"|"out", byte offset),
so the mapping is tested against the reference semantics without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.instance import Instance

Buffer = tuple[int, str, int]  # (rank, "in" | "out", byte offset)

# ncclDataType_t and ncclRedOp_t values (nccl.h); cupy.cuda.nccl exports the same.
NCCL_DTYPES = {"int32": 2, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
NCCL_COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "broadcast",
    "reduce",
    "all-to-all",
    "gather",
    "scatter",
)


@dataclass(frozen=True)
class NcclCall:
    rank: int
    method: str  # a method of cupy.cuda.nccl.NcclCommunicator
    args: tuple[Any, ...]  # buffers as Buffer tuples, then counts, dtype, op, root/peer


def nccl_calls(inst: Instance, dtype: str, redop: str | None) -> list[NcclCall]:
    """The NCCL calls, one group, that compute ``inst`` (raises if none do)."""
    name, R, n, root = inst.spec.name, inst.ranks, inst.count, inst.root
    dt, op, size = NCCL_DTYPES[dtype], NCCL_OPS[redop or "sum"], inst.itemsize
    calls: list[NcclCall] = []
    for r in range(R):
        src, dst = (r, "in", 0), (r, "out", 0)
        if name == "all-reduce":
            calls.append(NcclCall(r, "allReduce", (src, dst, n, dt, op)))
        elif name == "all-gather":
            calls.append(NcclCall(r, "allGather", (src, dst, n, dt)))
        elif name == "reduce-scatter":
            calls.append(NcclCall(r, "reduceScatter", (src, dst, n, dt, op)))
        elif name == "broadcast":
            calls.append(NcclCall(r, "broadcast", (src, dst, n, dt, root)))
        elif name == "reduce":
            calls.append(NcclCall(r, "reduce", (src, dst, n, dt, op, root)))
        elif name == "all-to-all":
            for peer in range(R):
                calls.append(NcclCall(r, "send", ((r, "in", peer * n * size), n, dt, peer)))
                calls.append(NcclCall(r, "recv", ((r, "out", peer * n * size), n, dt, peer)))
        elif name == "gather":
            calls.append(NcclCall(r, "send", (src, n, dt, root)))
            if r == root:
                calls.extend(NcclCall(r, "recv", ((r, "out", peer * n * size), n, dt, peer)) for peer in range(R))
        elif name == "scatter":
            if r == root:
                calls.extend(NcclCall(r, "send", ((r, "in", peer * n * size), n, dt, peer)) for peer in range(R))
            calls.append(NcclCall(r, "recv", (dst, n, dt, root)))
        else:
            raise PurlinError(f"NCCL has no equivalent of '{name}': no NCCL baseline for it")
    return calls


class NcclBaseline:
    """Runs :func:`nccl_calls` on one communicator over the world's GPUs, into
    its own output buffers, as one NCCL group per call. With one process per
    rank (``group`` given) each process joins one communicator of the run
    (the unique id goes out from rank 0 over the group) and makes its own
    rank's calls."""

    name = "nccl"

    def __init__(self, inst: Instance, runner, dtype: str, redop: str | None, group=None):
        import cupy
        from cupy.cuda import nccl

        self.local = tuple(runner.world.local_ranks)
        if group is None:
            devices = list(runner.world.devices)
            if len(set(devices)) != len(devices):
                raise PurlinError("the NCCL baseline needs one rank per GPU (--gpus)")
        elif runner.world.shared_gpu:
            raise PurlinError("NCCL refuses two ranks on one GPU: no NCCL baseline with several processes on one GPU")
        self.calls = [c for c in nccl_calls(inst, dtype, redop) if c.rank in self.local]
        self.nccl, self.runner = nccl, runner
        if group is None:
            self.comms = dict(enumerate(nccl.NcclCommunicator.initAll(devices)))
        else:
            uid = group.broadcast(nccl.get_unique_id() if group.rank == 0 else None, "nccl-unique-id")
            with cupy.cuda.Device(runner.world.devices[group.rank]):
                self.comms = {group.rank: nccl.NcclCommunicator(group.size, uid, group.rank)}
        self.outputs, self.streams = {}, []
        for rank in self.local:
            with cupy.cuda.Device(runner.world.devices[rank]):
                self.outputs[rank] = cupy.empty(max(1, inst.out_counts[rank]) * inst.itemsize, dtype=cupy.uint8)
                self.streams.append(cupy.cuda.Stream(non_blocking=True))

    def _ptr(self, buf: Buffer, slot: int) -> int:
        rank, which, offset = buf
        base = self.runner.array(rank, "in", slot).data.ptr if which == "in" else self.outputs[rank].data.ptr
        return base + offset

    def __call__(self, stream, slot: int = 0) -> None:
        """Enqueue one call, forked from and joined back into ``stream``."""
        import cupy

        start = cupy.cuda.Event(disable_timing=True)
        start.record(stream)
        for s in self.streams:
            s.wait_event(start)
        self.nccl.groupStart()
        for call in self.calls:
            args = [self._ptr(a, slot) if isinstance(a, tuple) else a for a in call.args]
            with cupy.cuda.Device(self.runner.world.devices[call.rank]):
                getattr(self.comms[call.rank], call.method)(*args, self.streams[call.rank].ptr)
        self.nccl.groupEnd()
        for s in self.streams:
            done = cupy.cuda.Event(disable_timing=True)
            done.record(s)
            stream.wait_event(done)
