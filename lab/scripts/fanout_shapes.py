"""Which shape of SM kernel brings a 1-to-8 fan-out nearest its floor.

The fan-outs (all-gather, broadcast) stop at 85-87% of the copy floor at
256 MiB, where the copies and reductions reach 93-105%, and write-only
traffic runs faster than a copy's mix (lab/scripts/fanout_probe.py), so the
bytes alone do not explain it. This times bare CuPy kernels of one 1-to-8
broadcast (one source, eight destination buffers, 16-byte vectors) in one
process, beside cudaMemcpyAsync, cudaMemsetAsync and the same kernels'
1-to-1 copy and 8-way write, so the loss can be pinned on a shape:

- ``fan K=k U=u``: each block loads a chunk of u vectors a thread once and
  stores it to k of the 8 destinations; 8/k blocks share a chunk (the
  source is read 8/k times, from L2 when they run together). k=8 is what
  purlin's fan-out op does, k=1 a copy per destination.
- ``grid-stride U=u``: k=8 with a grid-stride loop instead of chunks.
- ``8 parts U=u``: k=8, each block on one eighth of the source (as the
  all-gather's push has each rank's blocks on its own input).
- grids of 1, 2 and 4 blocks of 512 threads an SM.
- ``bulk copy (TMA)``: the SM's bulk-copy unit moves the tiles (sm_90 and
  up), one issuing thread a block, several tiles in flight; 1-to-1 too.

    python3 lab/scripts/fanout_shapes.py [--mib 256] [--reps 10] [--unroll U]... [--k K]... [--only-tma]

Each row: median us, and the share of the floor, (1 + 8) * S / copy rate
(the roofline's definition), with S the source's bytes.
"""

from __future__ import annotations

import argparse
import sys

from fanout_probe import timed  # lab/scripts/ is this script's own folder on sys.path

from purlin_bench.spec.roofline import fanout_share

R = 8
KERNELS = r"""
#define PICK(i) ((i) == 0 ? d0 : (i) == 1 ? d1 : (i) == 2 ? d2 : (i) == 3 ? d3 : (i) == 4 ? d4 : (i) == 5 ? d5 : (i) == 6 ? d6 : d7)
#define DSTS uint4* d0, uint4* d1, uint4* d2, uint4* d3, uint4* d4, uint4* d5, uint4* d6, uint4* d7

// Each block group of 8/FAN_K blocks shares a chunk; block b stores to FAN_K destinations.
extern "C" __global__ void __launch_bounds__(512) fan(const uint4* __restrict__ s, DSTS, long long n) {
  const int groups = 8 / FAN_K;
  const int dg = blockIdx.x % groups;
  const long long first = blockIdx.x / groups, step = gridDim.x / groups;
  uint4* q[FAN_K];
#pragma unroll
  for (int k = 0; k < FAN_K; k++) q[k] = PICK(dg * FAN_K + k);
  const long long chunk = (long long)blockDim.x * FAN_U;
  for (long long c = first; c * chunk < n; c += step) {
    const long long base = c * chunk + threadIdx.x;
    uint4 v[FAN_U];
#pragma unroll
    for (int u = 0; u < FAN_U; u++) { long long j = base + u * blockDim.x; if (j < n) v[u] = s[j]; }
#pragma unroll
    for (int k = 0; k < FAN_K; k++)
#pragma unroll
      for (int u = 0; u < FAN_U; u++) { long long j = base + u * blockDim.x; if (j < n) q[k][j] = v[u]; }
  }
}

extern "C" __global__ void __launch_bounds__(512) fan_grid_stride(const uint4* __restrict__ s, DSTS, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride * FAN_U) {
    uint4 v[FAN_U];
#pragma unroll
    for (int u = 0; u < FAN_U; u++) { long long j = i + u * stride; if (j < n) v[u] = s[j]; }
#pragma unroll
    for (int u = 0; u < FAN_U; u++) {
      long long j = i + u * stride;
      if (j < n) { d0[j] = v[u]; d1[j] = v[u]; d2[j] = v[u]; d3[j] = v[u]; d4[j] = v[u]; d5[j] = v[u]; d6[j] = v[u]; d7[j] = v[u]; }
    }
  }
}

// The all-gather's order: block b sweeps part b % 8 of the source (rank b % 8's
// input), so the writes in flight spread over 8 regions of every destination.
extern "C" __global__ void __launch_bounds__(512) fan_parts(const uint4* __restrict__ s, DSTS, long long n) {
  const long long part = n / 8, first = blockIdx.x / 8, step = gridDim.x / 8;
  const long long begin = (blockIdx.x % 8) * part;
  const long long chunk = (long long)blockDim.x * FAN_U;
  for (long long c = first; c * chunk < part; c += step) {
    const long long base = begin + c * chunk + threadIdx.x, end = begin + part;
    uint4 v[FAN_U];
#pragma unroll
    for (int u = 0; u < FAN_U; u++) { long long j = base + u * blockDim.x; if (j < end) v[u] = s[j]; }
#pragma unroll
    for (int u = 0; u < FAN_U; u++) {
      long long j = base + u * blockDim.x;
      if (j < end) { d0[j] = v[u]; d1[j] = v[u]; d2[j] = v[u]; d3[j] = v[u]; d4[j] = v[u]; d5[j] = v[u]; d6[j] = v[u]; d7[j] = v[u]; }
    }
  }
}

extern "C" __global__ void __launch_bounds__(512) copy1(const uint4* __restrict__ s, uint4* d, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride * FAN_U) {
    uint4 v[FAN_U];
#pragma unroll
    for (int u = 0; u < FAN_U; u++) { long long j = i + u * stride; if (j < n) v[u] = s[j]; }
#pragma unroll
    for (int u = 0; u < FAN_U; u++) { long long j = i + u * stride; if (j < n) d[j] = v[u]; }
  }
}

extern "C" __global__ void __launch_bounds__(512) write8(DSTS, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const uint4 v = make_uint4(blockIdx.x, threadIdx.x, 1u, 2u);
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    d0[i] = v; d1[i] = v; d2[i] = v; d3[i] = v; d4[i] = v; d5[i] = v; d6[i] = v; d7[i] = v;
  }
}
"""


# The same broadcast on the SM's bulk-copy (TMA) unit, sm_90 and up: one
# thread a block streams tiles of the source into shared memory
# (cp.async.bulk, completing on an mbarrier) and issues FAN_D bulk stores of
# each tile (cp.async.bulk.global.shared), STAGES tiles in flight. No thread
# waits on a load before it can store: the loads run STAGES-1 tiles ahead.
TMA_KERNELS = r"""
#define PICK(i) ((i) == 0 ? d0 : (i) == 1 ? d1 : (i) == 2 ? d2 : (i) == 3 ? d3 : (i) == 4 ? d4 : (i) == 5 ? d5 : (i) == 6 ? d6 : d7)
__device__ __forceinline__ unsigned smem_at(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void load_tile(unsigned char* tile, const char* from, unsigned long long* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_at(bar)), "r"(TILE) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_at(tile)), "l"(from), "r"(TILE), "r"(smem_at(bar)) : "memory");
}

__device__ __forceinline__ void wait_tile(unsigned long long* bar, unsigned parity) {
  asm volatile("{\n .reg .pred done;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n @!done bra WAIT_%=;\n}"
               :: "r"(smem_at(bar)), "r"(parity) : "memory");
}

extern "C" __global__ void tma_fan(const char* __restrict__ s, char* d0, char* d1, char* d2, char* d3, char* d4, char* d5, char* d6, char* d7, long long nbytes) {
  extern __shared__ __align__(128) unsigned char tiles[];
  __shared__ __align__(8) unsigned long long bars[STAGES];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < STAGES; i++)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_at(&bars[i])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const long long ntiles = nbytes / TILE;
  const long long mine = (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
  for (long long k = 0; k < STAGES && k < mine; k++)
    load_tile(tiles + k * TILE, s + (blockIdx.x + k * gridDim.x) * TILE, &bars[k]);
  for (long long k = 0; k < mine; k++) {
    const int stage = k % STAGES;
    wait_tile(&bars[stage], (unsigned)((k / STAGES) & 1));
    const long long at = (blockIdx.x + k * gridDim.x) * TILE;
#pragma unroll
    for (int d = 0; d < FAN_D; d++)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(PICK(d) + at), "r"(smem_at(tiles + stage * TILE)), "r"(TILE) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // The tile before this one is refilled once its stores have read it
    // (every bulk group but the newest), STAGES tiles on.
    if (k >= 1 && k - 1 + STAGES < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      const int prev = (k - 1) % STAGES;
      load_tile(tiles + prev * TILE, s + (blockIdx.x + (k - 1 + STAGES) * gridDim.x) * TILE, &bars[prev]);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
"""
# (tile bytes, stages, blocks an SM): 192 KiB of shared memory an SM in each.
# The kernel moves whole tiles only, so a tile must divide 1 MiB (--mib is
# whole MiB): on 2026-12-04 tiles of 48, 96 and 112 KiB left the tail of a
# 256 MiB source uncopied, and the check said WRONG.
TMA_SHAPES = ((32 << 10, 6, 1), (64 << 10, 3, 1), (16 << 10, 12, 1), (32 << 10, 3, 2), (16 << 10, 6, 2))

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="the source's bytes, in MiB (each destination as many)")
    ap.add_argument("--reps", type=int, default=10)
    # 16 spills in the chunked kernel (32 bytes at sm_90): its time would be the spill's
    ap.add_argument("--unroll", type=int, action="append", choices=(2, 4, 8), help="vectors a thread loads before it stores (repeatable; default 2 and 4)")
    ap.add_argument("--only-tma", action="store_true", help="time only the bulk-copy (TMA) kernels beside the memcpy")
    ap.add_argument("--k", type=int, action="append", choices=(1, 2, 4, 8), help="destinations a block stores to (repeatable; default 8 4 2 1)")
    args = ap.parse_args()
    if args.mib < 1 or args.reps < 1:
        ap.error("--mib and --reps must be at least 1")
    import cupy

    nbytes = args.mib << 20
    n = nbytes // 16
    rt = cupy.cuda.runtime
    sms = rt.getDeviceProperties(0)["multiProcessorCount"]
    src = cupy.arange(nbytes // 4, dtype=cupy.uint32)
    dsts = [cupy.empty(nbytes, dtype=cupy.uint8) for _ in range(R)]
    ptrs = list(dsts)
    stream = cupy.cuda.Stream(non_blocking=True)

    def module(k: int, u: int):
        return cupy.RawModule(code=KERNELS, options=("-std=c++17", f"-DFAN_K={k}", f"-DFAN_U={u}"))

    def time_us(run) -> float:
        return timed(run, stream, args.reps) * 1e6

    def checked(label: str, run, moved: int, into=dsts) -> tuple[str, float, int, bool]:
        """A row of ``run`` timed on zeroed destinations, then ``into`` checked against the source."""
        for d in dsts:
            d.fill(0)
        us = time_us(run)
        want = src.view(cupy.uint8)
        return label, us, moved, all(bool((d == want).all()) for d in into)

    rows: list[tuple[str, float, float | None, bool | None]] = []  # name, us, bytes moved, checked
    with stream:
        copy_us = time_us(lambda: rt.memcpyAsync(dsts[0].data.ptr, src.data.ptr, nbytes, rt.memcpyDefault, stream.ptr))
        write_us = time_us(lambda: rt.memsetAsync(dsts[0].data.ptr, 0, nbytes, stream.ptr))
        c, w = 2 * nbytes / copy_us, nbytes / write_us  # bytes a microsecond
        floor_us = (1 + R) * nbytes / c
        rows.append(("cudaMemcpyAsync 1-to-1", copy_us, 2 * nbytes, None))
        rows.append(("cudaMemsetAsync 1 buffer", write_us, nbytes, None))

        def memcpy8():
            for d in dsts:
                rt.memcpyAsync(d.data.ptr, src.data.ptr, nbytes, rt.memcpyDefault, stream.ptr)

        rows.append(checked("cudaMemcpyAsync x8", memcpy8, 16 * nbytes))
        for tile, stages, per_sm in TMA_SHAPES:
            grid, smem = sms * per_sm, tile * stages
            for fan_d in (1, R):
                kt = cupy.RawKernel(TMA_KERNELS, "tma_fan", options=("-std=c++17", f"-DTILE={tile}", f"-DSTAGES={stages}", f"-DFAN_D={fan_d}"))
                kt.max_dynamic_shared_size_bytes = smem
                rows.append(checked(f"bulk copy (TMA) 1-to-{fan_d} tile={tile >> 10}K stages={stages} grid={per_sm}/SM",
                                    lambda: kt((grid,), (32,), (src, *ptrs, cupy.int64(nbytes)), shared_mem=smem),
                                    (1 + fan_d) * nbytes if fan_d == R else 2 * nbytes, dsts[:fan_d]))
        for u in () if args.only_tma else (args.unroll or (2, 4)):
            mod = module(8, u)
            for per_sm in (1, 2, 4):
                grid = (sms * per_sm // R) * R
                k1, kw, kg, kp = (mod.get_function(f) for f in ("copy1", "write8", "fan_grid_stride", "fan_parts"))
                rows.append((f"copy1 1-to-1 U={u} grid={per_sm}/SM", time_us(lambda: k1((grid,), (512,), (src, dsts[0], cupy.int64(n)))), 2 * nbytes, None))
                rows.append((f"write8 U=1 grid={per_sm}/SM", time_us(lambda: kw((grid,), (512,), (*ptrs, cupy.int64(n)))), R * nbytes, None))
                rows.append(checked(f"grid-stride K=8 U={u} grid={per_sm}/SM", lambda: kg((grid,), (512,), (src, *ptrs, cupy.int64(n))), (1 + R) * nbytes))
                rows.append(checked(f"8 parts K=8 U={u} grid={per_sm}/SM", lambda: kp((grid,), (512,), (src, *ptrs, cupy.int64(n))), (1 + R) * nbytes))
            for k in args.k or (8, 4, 2, 1):
                kf = module(k, u).get_function("fan")
                for per_sm in (1, 2, 4):
                    grid = (sms * per_sm // R) * R
                    rows.append(checked(f"fan K={k} U={u} grid={per_sm}/SM", lambda: kf((grid,), (512,), (src, *ptrs, cupy.int64(n))), (1 + R) * nbytes))
    name = rt.getDeviceProperties(0)["name"]
    print(f"# {name.decode() if isinstance(name, bytes) else name}, {sms} SMs; 1-to-{R} broadcast of {args.mib} MiB, median of {args.reps}")
    print(f"# copy {c / 1e3:.0f} GB/s, write {w / 1e3:.0f} GB/s; fan-out floor {floor_us:.1f} us; "
          f"a fan-out bound by these rates reaches {fanout_share(c, w, R):.3f} of it")
    print(f"{'variant':40s} {'us':>9s} {'GB/s':>7s} {'of floor':>9s}  checked")
    for label, us, moved, checked in rows:
        share = f"{floor_us / us:9.3f}" if checked is not None and moved != 2 * nbytes else f"{'':9s}"
        mark = "" if checked is None else ("ok" if checked else "WRONG")
        print(f"{label:40s} {us:9.1f} {moved / us / 1e3:7.0f} {share}  {mark}")
    return 0 if all(ch is not False for *_, ch in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
