"""The compiled datapath: one launch's step table as CUDA C++ of its own.

The interpreter (atoms/snac.cu) reads every op from a 608-byte record, then
the slice bases, then the flag addresses, before the first byte moves: a
chain of dependent global loads per op. Here the same lowered ops become
straight-line code, one ``case`` per (rank, channel) group, with counts,
offsets, flag indices and the block count as constants and the buffer
bases and flag words as kernel parameters (constant-bank loads). The data
movement, the flags and the watchdog are the interpreter's own functions:
the generated kernel is appended to snac.cu's primitives, so both datapaths
move bytes, order flags and report timeouts the same way, block for block
and element for element.

Pure text: tested and compiled (nvcc, in CI) without a GPU; on a GPU CuPy's
NVRTC compiles it, and caches the module on disk by a hash of the source, the
options and the toolkit, so a program compiles once per machine.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Sequence

from purlin_bench.backends.cupy.lower import OFFSET_BITS, OP_COPY, OP_NONE, OP_REDUCE, Lowered
from purlin_bench.errors import PlanError

KERNEL = "purlin_compiled"
# Ops one compiled launch may hold: NVRTC takes about a millisecond per op,
# and a tuner trial must stay bounded; a ring over thousands of slices runs
# the interpreter instead.
MAX_OPS = 1024
# Where snac.cu's primitives end and its interpreter kernel begins.
_KERNEL_MARK = "// ---------------------------------------------------------------------- kernel"
_KIND = {OP_NONE: "OP_NONE", OP_COPY: "OP_COPY", OP_REDUCE: "OP_REDUCE"}

_PROLOGUE = r"""
#ifndef PURLIN_UNROLL
#define PURLIN_UNROLL 2
#endif
#ifndef PURLIN_MAX_THREADS
#define PURLIN_MAX_THREADS 512
#endif
#ifndef PURLIN_MIN_BLOCKS
#define PURLIN_MIN_BLOCKS (512 / PURLIN_MAX_THREADS > 0 ? 512 / PURLIN_MAX_THREADS : 1)
#endif

// Thread 0 waits for each flag to reach `target`, bounded as the
// interpreter's waits are; 1 when the call aborted (this wait timed out, or
// another's did).
template <int N>
__device__ __forceinline__ int purlin_wait(u64* const (&flags)[N], const int (&ids)[N], u64 target, u64 timeout_ns,
                                           int* abort_flag, i64* status, int rank, int channel, int step) {
    // Unrolled: the flags' addresses then stay in registers (a rolled loop
    // indexes the array, which puts it in local memory).
#pragma unroll
    for (int w = 0; w < N; ++w) {
        u64 start = now_ns(), seen = 0;
        for (u32 spin = 1;; ++spin) {
            seen = ld_acquire(flags[w]);
            if (seen >= target) break;
            if ((spin & 255u) == 0) {
                if (*(volatile int*)abort_flag) return 1;
                u64 waited = now_ns() - start;
                if (waited > timeout_ns) {
                    if (atomicCAS(abort_flag, 0, 1) == 0) {
                        status[1] = rank; status[2] = channel; status[3] = step;
                        status[4] = ids[w]; status[5] = (i64)seen; status[6] = (i64)target;
                        status[7] = (i64)waited;
                        __threadfence_system();
                        *(volatile i64*)status = ST_TIMEOUT;
                    }
                    return 1;
                }
            }
        }
    }
    return 0;
}

// The interpreter's rule: vectors only if every slice has the same offset
// within 16 bytes, and that offset is whole elements. Thread 0 also puts
// the slice pointers in shared memory, as the interpreter does: held in
// registers by every thread, 16 of them pushed an 8-rank float16
// reduction past 128 registers (ptxas spilled).
template <int NS, int ND>
__device__ __forceinline__ void purlin_slices(char* const (&src)[NS], char* const (&dst)[ND], i64 count, char** s_src, char** s_dst, int* s_meta) {
    const u64 mis = (u64)src[0] & 15u;
    bool same = true;
#pragma unroll
    for (int k = 0; k < NS; ++k) { same = same && (((u64)src[k] & 15u) == mis); s_src[k] = src[k]; }
#pragma unroll
    for (int k = 0; k < ND; ++k) { same = same && (((u64)dst[k] & 15u) == mis); s_dst[k] = dst[k]; }
    const bool aligned = same && (mis % sizeof(S)) == 0;
    i64 h = aligned ? (i64)((16 - mis) & 15) / (i64)sizeof(S) : 0;
    s_meta[0] = aligned;
    s_meta[1] = (int)(h < count ? h : count);
}

"""


def primitives(snac_source: str) -> str:
    """snac.cu up to its interpreter kernel: types, loads, flags, data movement."""
    if _KERNEL_MARK not in snac_source:
        raise PlanError("atoms/snac.cu has no kernel marker: the compiled datapath cannot reuse its primitives")
    return snac_source.split(_KERNEL_MARK, 1)[0]


def _base(packed: int) -> tuple[int, int]:
    return packed >> OFFSET_BITS, packed & ((1 << OFFSET_BITS) - 1)


def _slices(packed: Sequence[int]) -> str:
    parts = []
    for p in packed:
        index, offset = _base(int(p))
        parts.append(f"b{index} + {offset}ll * (i64)sizeof(S)")
    return ", ".join(parts)


def _flags(ids: Sequence[int]) -> str:
    return ", ".join(f"f{int(i) >> 20} + {int(i) & 0xFFFFF}" for i in ids)


def _op_code(op, k: int, rank: int, channel: int) -> list[str]:
    """One op as the interpreter runs it, less the reads of its record:
    thread 0 sets up the slices and waits, one barrier, every thread moves
    its elements, a barrier before thread 0 notifies."""
    kind, count = int(op["op"]), int(op["count"])
    what = {OP_NONE: "flags only", OP_COPY: f"copy {count} elements", OP_REDUCE: f"reduce {count} elements"}[kind]
    nwait, nsrc, ndst, nnot = int(op["nwait"]), int(op["nsrc"]), int(op["ndst"]), int(op["nnotify"])
    h = k & 1  # shared state by op parity, as the interpreter's (see snac.cu)
    lines = [f"    // step {int(op['step'])}: {what}"]
    first = []
    if kind != OP_NONE:
        first.append(
            f"char* const src[{nsrc}] = {{{_slices(op['src'][:nsrc])}}}; char* const dst[{ndst}] = {{{_slices(op['dst'][:ndst])}}};"
            f" purlin_slices<{nsrc}, {ndst}>(src, dst, {count}ll, s_src[{h}], s_dst[{h}], s_meta[{h}]);"
        )
    if nwait:
        ids = [int(x) for x in op["wait_id"][:nwait]]
        first.append(
            f"u64* const w[{nwait}] = {{{_flags(ids)}}}; const int id[{nwait}] = {{{', '.join(map(str, ids))}}};"
            f" s_abort[{h}] = purlin_wait<{nwait}>(w, id, target, timeout_ns, abort_flag, status, {rank}, {channel}, {int(op['step'])});"
        )
    if first:
        lines.append(f"    if (threadIdx.x == 0) {{ {' '.join(first)} }}")
    # A barrier at every op, as the interpreter passes one: the blocks of a
    # group then move the same elements in the same order.
    lines.append("    __syncthreads();")
    if nwait:
        lines.append(f"    if (s_abort[{h}]) return;")
    if kind != OP_NONE:
        lines.append(f"    move_op<PURLIN_UNROLL>({_KIND[kind]}, {count}ll, {nsrc}, {ndst}, s_src[{h}], s_dst[{h}], s_meta[{h}][0], s_meta[{h}][1], tid, stride);")
    if nnot:
        ids = [int(x) for x in op["notify"][:nnot]]
        lines.append("    __syncthreads();  // the whole block's writes happen before the release")
        lines.append(f"    if (threadIdx.x == 0) {{ fence_release(); {' '.join(f'red_release({_flags([i])});' for i in ids)} }}")
    return lines


def generate(lowered: Lowered, ranks: int, blocks: int, snac_source: str) -> str:
    """The CUDA C++ of one launch: ``lowered`` must carry flag ids
    (``lower(..., flag_address=flag_id)``) where the interpreter has addresses."""
    if len(lowered.ops) > MAX_OPS:
        raise PlanError(f"the compiled datapath takes at most {MAX_OPS} ops a launch, this program has {len(lowered.ops)}: use kernel=interpreted (or larger slices)")
    # No __restrict__ on the bases: in place, an output base points into its input.
    params = [f"char* b{i}" for i in range(3 * ranks)] + [f"u64* f{r}" for r in range(ranks)]
    out = [primitives(snac_source), _PROLOGUE, f"// {len(lowered.groups)} groups, {len(lowered.ops)} ops, {blocks} blocks a group"]
    out.append(f'extern "C" __global__ void __launch_bounds__(PURLIN_MAX_THREADS, PURLIN_MIN_BLOCKS) {KERNEL}(')
    out.append("    " + ", ".join(params) + ",")
    out.append("    u64* __restrict__ epochs, i64* status, int* abort_flag, u64 timeout_ns) {")
    out.append(f"  const int B = {blocks};")
    # By op parity, as the interpreter's: thread 0 may set op k+1's word while
    # a slower thread still reads op k's.
    out.append("  __shared__ char* s_src[2][MAX_SRC];")
    out.append("  __shared__ char* s_dst[2][MAX_DST];")
    out.append("  __shared__ int s_meta[2][2];  // aligned, head")
    if (lowered.ops["nwait"] > 0).any():
        out.append("  __shared__ int s_abort[2];")
    out.append("  const int bi = blockIdx.x % B;")
    out.append("  const u64 epoch = epochs[blockIdx.x] + 1;")
    out.append("  const u64 target = epoch * (u64)B;")
    out.append("  const i64 tid = (i64)bi * blockDim.x + threadIdx.x;")
    out.append("  const i64 stride = (i64)B * blockDim.x;")
    out.append("  (void)target; (void)tid; (void)stride; (void)s_src; (void)s_dst; (void)s_meta;  // a program without waits or data uses some of them only")
    out.append("  switch (blockIdx.x / B) {")
    for g, (begin, end, rank, channel) in enumerate(lowered.groups.tolist()):
        out.append(f"  case {g}: {{  // rank {rank} channel {channel}")
        for k in range(begin, end):
            out.extend(_op_code(lowered.ops[k], k, rank, channel))
        out.append("  } break;")
    out.append("  }")
    out.append("  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;")
    out.append("}")
    return "\n".join(out) + "\n"


def compiled_kernel(source: str, options: tuple[str, ...], device: int):
    """``source``'s kernel on ``device`` and the seconds this call spent
    building it (NVRTC on a machine's first use, CuPy's on-disk cache after;
    0 when this process built it already)."""
    key = (source, options, device)
    first = key not in _built
    kernel, seconds = _build(source, options, device)
    _built.add(key)
    return kernel, seconds if first else 0.0


_built: set[tuple] = set()


@lru_cache(maxsize=256)
def _build(source: str, options: tuple[str, ...], device: int):
    import cupy

    from purlin_bench.errors import ExecutionError

    start = time.perf_counter()
    with cupy.cuda.Device(device):
        try:
            kernel = cupy.RawModule(code=source, options=options).get_function(KERNEL)
            kernel.attributes  # loads the module now, so the build is timed here
        except cupy.cuda.compiler.CompileException as exc:
            first = next((line for line in str(exc).splitlines() if "error" in line), str(exc).splitlines()[0])
            raise ExecutionError(f"the compiled datapath failed to build: {first.strip()}") from None
    return kernel, time.perf_counter() - start
