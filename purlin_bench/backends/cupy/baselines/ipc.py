"""The baseline for ranks as processes: one kernel per process, one shot.

What a user writes for a collective across processes on CUDA IPC, as the
serving engines' custom all-reduce kernels are: every process launches one
kernel that (1) meets every peer at a start barrier, so their inputs are in
this call, (2) reads each of its own output elements' sources straight from
the peers' inputs (their IPC-mapped buffers) and copies or reduces them into
its own output with 16-byte vectors, and (3) meets every peer at an end
barrier, so no peer still reads its input when the call returns. The
barriers are per block (block b of every rank meets block b of every other),
with epoch counters in device memory, so a call replays from a CUDA graph
with no host work; every wait is bounded by the run's watchdog.

Built from the spec's dataflow (which input chunks feed each output chunk),
never from a collective's name, so it times every collective; it is what
NCCL would be on one GPU, where NCCL refuses two ranks. Its outputs are its
own buffers, checked against the reference before it is timed.
"""

from __future__ import annotations

import numpy as np

from purlin_bench.backends.cupy.codegen.lower import MAX_SRC
from purlin_bench.backends.cupy.runtime.occupancy import blocks_per_sm, resident_share
from purlin_bench.base.errors import PurlinError, WatchdogTimeout
from purlin_bench.spec.instance import Instance

BLOCKS, THREADS = 8, 512  # at most, per process: 8 x 8 processes fit one H200 (D41)

_KERNEL = r"""
struct Task { i64 count; i64 dst; i64 nsrc; i64 src[MAX_SRC]; };

__device__ __forceinline__ int meet(u64* mine, u64* const* peers, int phase, int rank, int R, u64 epoch,
                                    i64* status, u64 timeout_ns) {
    // Thread t < R bumps peer t's word for (phase, block, this rank), then
    // waits for peer t's bump of this rank's word for (phase, block, t).
    const int B = gridDim.x;
    int failed = 0;
    if (threadIdx.x < R) {
        const int t = threadIdx.x;
        __threadfence_system();
        red_release(peers[t] + ((u64)phase * B + blockIdx.x) * R + rank);
        const u64* word = mine + ((u64)phase * B + blockIdx.x) * R + t;
        u64 start = now_ns();
        for (u32 spin = 1; ld_acquire(word) < epoch; ++spin) {
            if ((spin & 255u) == 0 && now_ns() - start > timeout_ns) {
                status[0] = 1; status[1] = rank; status[2] = phase; status[3] = t;
                __threadfence_system();
                failed = 1;
                break;
            }
        }
    }
    return __syncthreads_or(failed);
}

extern "C" __global__ void __launch_bounds__(512) ipc_oneshot(
    const Task* __restrict__ tasks, int ntasks, u64* mine, u64* const* peers, int rank, int R,
    u64* epochs, i64* status, u64 timeout_ns) {
    const u64 epoch = epochs[blockIdx.x] + 1;
    if (meet(mine, peers, 0, rank, R, epoch, status, timeout_ns)) return;
    const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    for (int k = 0; k < ntasks; ++k) {
        const Task& t = tasks[k];
        char* src[MAX_SRC];
        char* dst[1] = {(char*)t.dst};
        int nsrc = (int)t.nsrc;
        u64 mis = (u64)t.dst;
        for (int s = 0; s < nsrc; ++s) { src[s] = (char*)t.src[s]; mis |= (u64)t.src[s]; }
        const int kind = nsrc > 1 ? OP_REDUCE : OP_COPY;
        move_op<PURLIN_UNROLL>(kind, t.count, nsrc, 1, src, dst, (mis & 15u) == 0 ? SPLIT_VECTORS : SPLIT_ELEMENTS, 0,
                               tid, stride);
    }
    __syncthreads();
    if (meet(mine, peers, 1, rank, R, epoch, status, timeout_ns)) return;
    if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}
"""


def tasks_of(inst: Instance, rank: int) -> list[tuple[int, int, tuple[tuple[int, int], ...]]]:
    """Rank ``rank``'s work from the dataflow: (count, output offset, sources
    as (rank, input offset)) per output chunk it holds, in elements."""
    out = []
    for flow in inst.flows:
        for place in flow.consumers:
            if place.rank == rank and flow.count:
                if len(flow.sources) > MAX_SRC:
                    raise PurlinError(
                        f"the ipc baseline reduces at most {MAX_SRC} sources a chunk, not {len(flow.sources)}"
                    )
                out.append((flow.count, place.offset, tuple((s.rank, s.offset) for s in flow.sources)))
    return out


class IpcBaseline:
    """This process's part of the one-shot baseline over ``runner``'s inputs
    (every rank makes one, collectively, and they run together)."""

    name = "ipc"

    def __init__(self, inst: Instance, runner, timeout_s: float):
        import cupy

        from purlin_bench.backends.cupy.codegen.atoms import compile_options, source_text
        from purlin_bench.backends.cupy.codegen.compiled import primitives

        world, program = runner.world, runner.program
        if program.inplace:
            raise PurlinError("the ipc baseline runs out of place only")
        # Refused on every rank alike, before any collective step: a rank that
        # refused alone would leave the others waiting at their barriers.
        widest = max((len(f.sources) for f in inst.flows), default=0)
        if widest > MAX_SRC:
            raise PurlinError(f"the ipc baseline reduces at most {MAX_SRC} sources a chunk, not {widest}")
        self.runner, self.rank, self.R = runner, world.rank, inst.ranks
        self.itemsize = runner.itemsize
        options = compile_options(program.dtype, program.redop or "sum", 2, THREADS, True, False)
        with cupy.cuda.Device(world.device):
            module = cupy.RawModule(
                code=primitives(source_text()) + _KERNEL.replace("MAX_SRC", str(MAX_SRC)), options=options
            )
            self.kernel = module.get_function("ipc_oneshot")
            # Blocks spin at the barriers: as purlin's own launches, every
            # rank's kernel must fit on the GPU at once (runtime/occupancy.py, D41),
            # and every rank takes the same count (their barriers pair by block).
            dev = cupy.cuda.Device(world.device).attributes
            per_sm = blocks_per_sm(dev, self.kernel.attributes["num_regs"], THREADS)
            share = resident_share(dev["MultiProcessorCount"], per_sm, world.sharing)
            self.blocks = world.agreed_blocks(max(1, min(BLOCKS, share)))
            # Every rank's flag words: [phase][block][from rank], made together.
            self.flags = world.symmetric_words([2 * self.blocks * self.R] * self.R)
            self.peers = cupy.asarray(np.array([f.data.ptr for f in self.flags], dtype=np.uint64))
            self.epochs = cupy.zeros(self.blocks, dtype=cupy.uint64)
            self.status = cupy.zeros(4, dtype=cupy.int64)
            self.output = cupy.zeros(max(1, inst.out_counts[self.rank]), dtype=runner.storage)
            self.tables = [self._table(inst, slot) for slot in range(runner.sets)]
        self.timeout_ns = np.uint64(int(timeout_s * 1e9))

    def _table(self, inst: Instance, slot: int):
        import cupy

        work = tasks_of(inst, self.rank)
        table = np.zeros((max(1, len(work)), 3 + MAX_SRC), dtype=np.int64)
        out = self.output.data.ptr
        for k, (count, at, sources) in enumerate(work):
            table[k, :3] = (count, out + at * self.itemsize, len(sources))
            for s, (rank, offset) in enumerate(sources):
                table[k, 3 + s] = self.runner.array(rank, "in", slot).data.ptr + offset * self.itemsize
        return cupy.asarray(table), np.int32(len(work))

    def __call__(self, stream, slot: int = 0) -> None:
        table, ntasks = self.tables[slot]
        args = (
            table,
            ntasks,
            self.flags[self.rank],
            self.peers,
            np.int32(self.rank),
            np.int32(self.R),
            self.epochs,
            self.status,
            self.timeout_ns,
        )
        self.kernel.kernel((self.blocks,), (THREADS,), args, stream=stream)

    def check(self, inst: Instance) -> None:
        """One call on buffer set 0, its output checked bit for bit against
        the reference semantics over every rank's inputs (read through IPC);
        raise if it is wrong or a wait timed out."""
        import cupy

        runner = self.runner
        inputs = [cupy.asnumpy(runner.array(r, "in", 0)).view(runner.dtype) for r in range(self.R)]
        expected = cupy.asarray(inst.reference(inputs, runner.program.redop)[self.rank].view(runner.storage))
        self(runner.main_stream(), 0)
        self.settle()
        width = {1: cupy.uint8, 2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}[self.itemsize]
        got = self.output[: expected.size].view(width)
        wrong = int(cupy.count_nonzero(got != expected.view(width)))
        if wrong:
            raise PurlinError(f"the ipc baseline got {wrong} elements of rank {self.rank}'s output wrong: not timed")

    def settle(self) -> None:
        import cupy

        cupy.cuda.Device(self.runner.world.device).synchronize()
        status = cupy.asnumpy(self.status)
        if status[0]:
            raise WatchdogTimeout(
                f"the ipc baseline's rank {status[1]} waited past the watchdog for rank {status[3]} at its "
                f"{'start' if status[2] == 0 else 'end'} barrier"
            )
