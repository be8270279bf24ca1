// SNAC step interpreter and Atom primitives: copy, reduce, notify, bounded wait.
//
// One launch runs one or more (rank, channel) step lists. Each list is walked
// by a group of `B` thread blocks; an op = [wait on flags] -> [copy or reduce,
// its elements shared by the group's blocks] -> [notify flags]. Every block of
// the producing group bumps a flag once per call, so a waiter in call `e`
// needs the flag to reach e * B (flags are epoch counters: no reset between
// calls, CUDA-graph replays just work). Each block keeps its own epoch word.
//
// Self-contained (no CUDA headers) so that NVRTC (through CuPy) and nvcc
// (CI's compile check) both build it. Compile with -DPURLIN_DTYPE=<0..4>
// (float32, float64, float16, bfloat16, int32), -DPURLIN_REDOP=<0..3> (sum,
// prod, max, min), -DPURLIN_UNROLL (vectors in flight per thread),
// -DPURLIN_MAX_THREADS (block size bound), -DPURLIN_SYS_SCOPE (0 when all
// ranks share one GPU) and -DPURLIN_COPY_ONLY (1 when no op reduces); the
// kernel is `snac_run`.

#ifndef PURLIN_DTYPE
#define PURLIN_DTYPE 0
#endif
#ifndef PURLIN_REDOP
#define PURLIN_REDOP 0
#endif

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;

#define MAX_SRC 16
#define MAX_DST 16
#define MAX_WAIT 16
#define MAX_NOTIFY 16
// A slice address packs (buffer index << 40) | element offset.
#define OFFSET_BITS 40

enum { OP_NONE = 0, OP_COPY = 1, OP_REDUCE = 2 };
enum { ST_OK = 0, ST_TIMEOUT = 1 };
// A launch's status words (host-mapped, so a caller reads them without a
// sync): [0] ST_TIMEOUT once a wait of this launch timed out, [1..7] where
// and on what, [8] 1 once a block of this launch left an aborted call (its
// own wait timed out, or another's, of any rank), [9] the address of the
// process's summary word, set to 1 then too (0: none). Plain stores only: host memory has no
// atomics we may count on, so the first timeout is chosen by the CAS on the
// abort word (purlin_bench/backends/cupy/runtime/status.py reads them).
#define STATUS_WORDS 16
#define STATUS_ABORTED 8
#define STATUS_SUMMARY 9
// [10] 1 once a call read a count outside 0..capacity, [11] which, [12] its value.
#define STATUS_BAD_COUNT 10

struct Op {  // 608 bytes; mirrored by OP_DTYPE in purlin_bench/backends/cupy/codegen/lower.py
    i64 count;
    int op, nsrc, ndst, nwait, nnotify, step;
    i64 src[MAX_SRC];
    i64 dst[MAX_DST];
    u64 wait[MAX_WAIT];      // flag word addresses (device or peer)
    u64 notify[MAX_NOTIFY];
    int wait_id[MAX_WAIT];   // (flag rank << 20) | flag index, for timeout reports
};

struct Group {  // one (rank, channel) list: ops [begin, end)
    int begin, end, rank, channel;
};

// Variable sizes (all-to-all-v and kin): the call's counts are in device
// memory (i64, one per chunk name) and a size table `vt` (int32, written by
// lower.py's variable_table) says how each slice moves with them:
// vt[0] counts N, vt[1] where op records start, vt[2] where count ids start,
// vt[3..3+N) capacities; an op's record is {clip count or -1, window start,
// then (first id, ids) per slice}. A slice's packed offset is its offset
// with every count before it 0; the kernel adds those counts. Every count
// is clamped to 0..capacity where it is read, so no count a GPU computed can
// move a slice out of its buffer; a count out of range is reported in the
// launch's status words (STATUS_BAD_COUNT), not silently used.
// Built in only with -DPURLIN_VARIABLE=1 (a variable program's kernel): the
// fixed programs' kernel sits at the register cap, and the few registers
// this takes spilled its float16 build on sm_100.
#define VAR_RECORD (2 + 2 * (MAX_SRC + MAX_DST))
#ifndef PURLIN_VARIABLE
#define PURLIN_VARIABLE 0
#endif

// ---------------------------------------------------------------- element types
// S: how an element is stored; A: what it is accumulated in (half types in float).
struct F32 { typedef float S; typedef float A;
    static __device__ A up(S x) { return x; } static __device__ S down(A x) { return x; } };
struct F64 { typedef double S; typedef double A;
    static __device__ A up(S x) { return x; } static __device__ S down(A x) { return x; } };
struct I32 { typedef int S; typedef int A;
    static __device__ A up(S x) { return x; } static __device__ S down(A x) { return x; } };
struct BF16 { typedef u16 S; typedef float A;
    static __device__ A up(S x) { return __uint_as_float(((u32)x) << 16); }
    static __device__ S down(A f) {  // round to nearest even; keep NaN a NaN
        u32 u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (u16)(u >> 16);
    } };
struct F16 { typedef u16 S; typedef float A;
    static __device__ A up(S x) { float f; asm("{ .reg .b16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x)); return f; }
    static __device__ S down(A f) { u16 x; asm("{ .reg .b16 h; cvt.rn.f16.f32 h, %1; mov.b16 %0, h; }" : "=h"(x) : "f"(f)); return x; } };

#if PURLIN_DTYPE == 0
typedef F32 Elem;
#elif PURLIN_DTYPE == 1
typedef F64 Elem;
#elif PURLIN_DTYPE == 2
typedef F16 Elem;
#elif PURLIN_DTYPE == 3
typedef BF16 Elem;
#else
typedef I32 Elem;
#endif

template <class A> __device__ __forceinline__ A combine(A a, A b) {
#if PURLIN_REDOP == 0
    return a + b;
#elif PURLIN_REDOP == 1
    return a * b;
#elif PURLIN_REDOP == 2
    return a > b ? a : b;
#else
    return a < b ? a : b;
#endif
}
// int32 sums and products wrap (two's complement), as NCCL's do; unsigned math keeps that defined.
template <> __device__ __forceinline__ int combine<int>(int a, int b) {
#if PURLIN_REDOP == 0
    return (int)((u32)a + (u32)b);
#elif PURLIN_REDOP == 1
    return (int)((u32)a * (u32)b);
#elif PURLIN_REDOP == 2
    return a > b ? a : b;
#else
    return a < b ? a : b;
#endif
}

// ------------------------------------------------------------- memory primitives
// Loads bypass L1 (.cg): data produced by another block or GPU in this launch
// must come from L2 or the peer, never from a stale L1 line.
__device__ __forceinline__ uint4 ld_vec(const void* p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_vec(void* p, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
template <class S> __device__ __forceinline__ S ld_one(const S* p);
template <> __device__ __forceinline__ float ld_one<float>(const float* p) { float v; asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v; }
template <> __device__ __forceinline__ double ld_one<double>(const double* p) { double v; asm volatile("ld.global.cg.f64 %0, [%1];" : "=d"(v) : "l"(p)); return v; }
template <> __device__ __forceinline__ int ld_one<int>(const int* p) { int v; asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p)); return v; }
template <> __device__ __forceinline__ u16 ld_one<u16>(const u16* p) { u16 v; asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p)); return v; }

// Flags are ordered at GPU scope when every rank is on this GPU (cheaper
// fences), at system scope when peers are other GPUs (PURLIN_SYS_SCOPE=1).
#ifndef PURLIN_SYS_SCOPE
#define PURLIN_SYS_SCOPE 1
#endif
#if PURLIN_SYS_SCOPE
#define SCOPE "sys"
__device__ __forceinline__ void fence_release() { __threadfence_system(); }
#else
#define SCOPE "gpu"
__device__ __forceinline__ void fence_release() { __threadfence(); }
#endif
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire." SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release(u64* p) {
    asm volatile("red.release." SCOPE ".global.add.u64 [%0], %1;" :: "l"(p), "l"(1ull) : "memory");
}
__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// This launch's waits left an aborted call: say so where the host reads it.
// Called by thread 0 of a block leaving an aborted call (its own wait timed
// out, or it saw the abort word): at the exit, not in the spin loop, whose
// registers are at the cap already.
__device__ __forceinline__ void mark_aborted(i64* status) {
    *(volatile i64*)(status + STATUS_ABORTED) = 1;
    __threadfence_system();  // the slot's mark before the summary's (status.py, recheck)
    i64* summary = (i64*)*(volatile u64*)(status + STATUS_SUMMARY);
    if (summary) *(volatile i64*)summary = 1;
    __threadfence_system();
}

// One count of the call, clamped to 0..its capacity.
__device__ __forceinline__ i64 var_count(const int* vt, const i64* counts, int id) {
    const i64 n = counts[id], cap = vt[3 + id];
    return n < 0 ? 0 : (n > cap ? cap : n);
}

// Elements slice `k` of an op (record `rec`) lies past its packed offset.
__device__ __forceinline__ i64 var_shift(const int* vt, const i64* counts, const int* rec, int k) {
    const int* ids = vt + vt[2] + rec[2 + 2 * k];
    i64 shift = 0;
    for (int b = 0, n = rec[3 + 2 * k]; b < n; ++b) shift += var_count(vt, counts, ids[b]);
    return shift;
}

// Count `id` of the call was `n`, outside its capacity: say so in the status
// words, once (the call runs with it clamped; the host raises on its next
// look at them). One thread of a launch, plain stores: the words are host
// memory (see above).
__device__ __forceinline__ void report_bad_count(i64* status, int id, i64 n) {
    if (*(volatile i64*)(status + STATUS_BAD_COUNT)) return;
    status[STATUS_BAD_COUNT + 1] = id;
    status[STATUS_BAD_COUNT + 2] = n;
    __threadfence_system();
    *(volatile i64*)(status + STATUS_BAD_COUNT) = 1;
    __threadfence_system();  // the slot's mark before the summary's (status.py, recheck)
    i64* summary = (i64*)*(volatile u64*)(status + STATUS_SUMMARY);
    if (summary) *(volatile i64*)summary = 1;
}

// Thread 0 of block 0 reports the first count outside its capacity.
__device__ void check_counts(const int* vt, const i64* counts, i64* status) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int id = 0; id < vt[0]; ++id) {
        const i64 n = counts[id];
        if (n >= 0 && n <= vt[3 + id]) continue;
        report_bad_count(status, id, n);
        return;
    }
}

// Test mode (PURLIN_JITTER_NS > 0): a block sleeps a pseudo-random time,
// the same for all its threads (so no barrier is added or needed), keyed by
// block, call, step and place, so that blocks and ranks reach each step in
// orders a quiet GPU never shows. A quarter of the draws sleep, up to
// PURLIN_JITTER_NS each. Off (0) it compiles to nothing.
#ifndef PURLIN_JITTER_NS
#define PURLIN_JITTER_NS 0
#endif
#ifndef PURLIN_JITTER_SEED
#define PURLIN_JITTER_SEED 1
#endif
__device__ __forceinline__ void jitter(u64 epoch, int step, int where) {
#if PURLIN_JITTER_NS > 0
    u32 h = (u32)PURLIN_JITTER_SEED * 0x9E3779B1u ^ (u32)blockIdx.x * 0x85EBCA77u ^ (u32)epoch * 0xC2B2AE3Du
            ^ (u32)step * 0x27D4EB2Fu ^ (u32)where * 0x165667B1u;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    if ((h & 3u) == 0) __nanosleep((h >> 2) % (u32)PURLIN_JITTER_NS);
#else
    (void)epoch; (void)step; (void)where;
#endif
}

// A program with no reduction runs a kernel built without the reduce code
// (PURLIN_COPY_ONLY=1): 72-95 registers instead of the cap of 128, and
// small copies 1-5% faster on the H200 (docs/decisions.md, D10).
#ifndef PURLIN_COPY_ONLY
#define PURLIN_COPY_ONLY 0
#endif
#define IS_REDUCE(kind) (!PURLIN_COPY_ONLY && (kind) == OP_REDUCE)
// Sources a small reduction loads per round (one vector or element each).
// 1 (one load at a time, as before) where ptxas would spill at the
// 128-register cap: float64, and 16-bit types below sm_90 (not measured on
// those GPUs: we keep their code as it was rather than guess).
#ifndef SHORT_BATCH
#if PURLIN_DTYPE == 1 || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900 && (PURLIN_DTYPE == 2 || PURLIN_DTYPE == 3))
#define SHORT_BATCH 1
#else
#define SHORT_BATCH 8
#endif
#endif
// Three slice bases (in, out, scratch) per rank: 64 ranks in shared memory.
#define MAX_SHARED_BASES 192

// ---------------------------------------------------------------- data movement
typedef Elem::S S;
typedef Elem::A A;
#define VEC (16 / (int)sizeof(S))

union Vec { uint4 u; S s[16 / sizeof(S)]; };

// U vectors of one source, `stride` apart, all issued before any is used.
template <int U>
__device__ __forceinline__ void load_vecs(Vec (&x)[U], const char* base, i64 head, i64 v, i64 stride, i64 nvec) {
#pragma unroll
    for (int k = 0; k < U; ++k) {
        i64 at = v + k * stride;
        if (at < nvec) x[k].u = ld_vec(base + (head + at * VEC) * sizeof(S));
    }
}

// One element's value: a copy's stored bits untouched; a reduction's sources
// through A, combined in their order and rounded once.
__device__ __forceinline__ S value_one(int kind, i64 i, int nsrc, char* const* src) {
    S out;
    if (IS_REDUCE(kind)) {
        // SHORT_BATCH sources' loads are issued before the first is combined:
        // one memory round trip per element for 8 ranks, not one per source.
        A a;
        for (int s0 = 0; s0 < nsrc; s0 += SHORT_BATCH) {
            S x[SHORT_BATCH];
#pragma unroll
            for (int j = 0; j < SHORT_BATCH; ++j)
                if (s0 + j < nsrc) x[j] = ld_one<S>((const S*)src[s0 + j] + i);
#pragma unroll
            for (int j = 0; j < SHORT_BATCH; ++j)
                if (s0 + j < nsrc) a = s0 + j == 0 ? Elem::up(x[j]) : combine<A>(a, Elem::up(x[j]));
        }
        out = Elem::down(a);
    } else {
        out = ld_one<S>((const S*)src[0] + i);
    }
    return out;
}

// One element, loaded (value_one) and stored to every destination.
__device__ __forceinline__ void move_one(int kind, i64 i, int nsrc, int ndst, char* const* src, char* const* dst) {
    const S out = value_one(kind, i, nsrc, src);
    for (int d = 0; d < ndst; ++d) ((S*)dst[d])[i] = out;
}

// Elements a thread's unaligned copy has in flight (move_op). Eight spilled
// in a compiled all-gather-v (eight destinations; sm_90), and a build that
// also reduces keeps one: even two spilled its reduce path (sm_100, float16,
// unroll 2, 512 threads; tests/kernels/test_atoms_compile.py).
#ifndef ELEM_BATCH
#if PURLIN_COPY_ONLY
#define ELEM_BATCH 4
#else
#define ELEM_BATCH 1
#endif
#endif

// Sources a reduction loads per batch: U*G = 8 vectors in flight per thread,
// the most that stays under 128 registers for every dtype at U=4.
#define SRC_BATCH(U) ((U) >= 8 ? 1 : 8 / (U))

template <int G, int U>
__device__ __forceinline__ void load_batch(Vec (&x)[G][U], char* const* src, int s0, int nsrc, i64 head, i64 v, i64 stride, i64 nvec) {
#pragma unroll
    for (int g = 0; g < G; ++g)
        if (s0 + g < nsrc) load_vecs<U>(x[g], src[s0 + g], head, v, stride, nvec);
}

// sum op= x[g] for g in [from, min(G, n)).
template <int G, int U>
__device__ __forceinline__ void combine_batch(A (&sum)[U][16 / sizeof(S)], const Vec (&x)[G][U], int from, int n) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (g < from || g >= n) continue;
#pragma unroll
        for (int k = 0; k < U; ++k)
#pragma unroll
            for (int e = 0; e < VEC; ++e) sum[k][e] = combine<A>(sum[k][e], Elem::up(x[g][k].s[e]));
    }
}

// SPLIT_LOADS is built into kernels of variable programs only (-DPURLIN_VARIABLE=1,
// or PURLIN_SPLIT_LOADS=1 in a compiled one's source), and not for 8-byte elements:
// fixed programs' slices sit at multiples of 16 bytes at the sizes that matter, and
// its element stores tipped builds at the 128-register cap into spills (float32
// max and min, float64 at unroll 4: sm_80-sm_100, tests/kernels/test_atoms_compile.py).
#ifndef PURLIN_SPLIT_LOADS
#define PURLIN_SPLIT_LOADS PURLIN_VARIABLE
#endif
#define HAS_SPLIT_LOADS (PURLIN_SPLIT_LOADS && sizeof(S) < 8)

// A reduction with at most one vector per thread (small messages): the
// sources' vectors are loaded SHORT_BATCH a round before any is combined, so
// an 8-rank small all-reduce waits on memory once, not once per batch of
// G = 8/U sources (0.2-0.9 us less at 16 B-64 KiB on the H200). Under SPLIT_LOADS
// (`vec_store` false) it stores the vector's elements one by one: skipped there, a
// reduce-scatter-v of 64 KiB-4 MiB took 0.2-0.8 us more (D55, D56).
__device__ __forceinline__ void reduce_one_vector(int nsrc, int ndst, char* const* src, char* const* dst, i64 at,
                                                  bool vec_store) {
    A sum[16 / sizeof(S)];
    Vec x[SHORT_BATCH];
    for (int s0 = 0; s0 < nsrc; s0 += SHORT_BATCH) {
#pragma unroll
        for (int j = 0; j < SHORT_BATCH; ++j)
            if (s0 + j < nsrc) x[j].u = ld_vec(src[s0 + j] + at);
#pragma unroll
        for (int j = 0; j < SHORT_BATCH; ++j) {
            if (s0 + j >= nsrc) continue;
#pragma unroll
            for (int e = 0; e < VEC; ++e) sum[e] = s0 + j == 0 ? Elem::up(x[j].s[e]) : combine<A>(sum[e], Elem::up(x[j].s[e]));
        }
    }
    Vec out;
#pragma unroll
    for (int e = 0; e < VEC; ++e) out.s[e] = Elem::down(sum[e]);
    if (vec_store || !HAS_SPLIT_LOADS) {
        for (int d = 0; d < ndst; ++d) st_vec(dst[d] + at, out.u);
    } else {
        for (int d = 0; d < ndst; ++d)
#pragma unroll
            for (int e = 0; e < VEC; ++e) ((S*)(dst[d] + at))[e] = out.s[e];
    }
}

// How move_op splits an op (split_of): SPLIT_VECTORS when every slice sits at one
// offset within 16 bytes; SPLIT_LOADS when the sources do and some destination does
// not (every variable-size slice at an odd element: reduce-scatter-v's sources sit at
// the rank's offset, its output at 0), which loads 16-byte vectors in the sources'
// alignment and stores element by element: the loads are what a thread waits on, and
// one at a time they held reduce-scatter-v to 0.65-0.77x torch (D55); else
// SPLIT_ELEMENTS, element by element.
enum { SPLIT_ELEMENTS = 0, SPLIT_VECTORS = 1, SPLIT_LOADS = 2 };

// The split of an op whose first source is `mis0` bytes past 16, given whether its
// sources (`srcs_same`) and all its slices (`all_same`) share that offset.
// SPLIT_LOADS only for an op with one destination: with eight (all-gather-v) its
// element stores ran 1.2-1.4x slower than element copies (D55).
__device__ __forceinline__ int split_of(u64 mis0, bool srcs_same, bool all_same, int ndst) {
    if (!srcs_same || mis0 % sizeof(S)) return SPLIT_ELEMENTS;
    return all_same ? SPLIT_VECTORS : (HAS_SPLIT_LOADS && ndst == 1 ? SPLIT_LOADS : SPLIT_ELEMENTS);
}

// Elements of an op of `count` before its sources' first 16-byte boundary (`mis`
// bytes past one) under `split`: move_op's head, which every caller works out alike.
__device__ __forceinline__ int head_of(int split, u64 mis, i64 count) {
    const i64 head = split ? ((16 - (i64)mis) & 15) / (i64)sizeof(S) : 0;
    return (int)(head < count ? head : count);
}

template <int U, int G = SRC_BATCH(U)>
__device__ __forceinline__ void move_op(int kind, i64 count, int nsrc, int ndst, char* const* src, char* const* dst, int split, int head, i64 tid, i64 stride) {
    if (split != SPLIT_ELEMENTS) {
        // Elements before the sources' first 16-byte boundary and after the last full vector go one by one.
        i64 nvec = (count - head) / VEC;
        i64 tail = head + nvec * VEC;
#if PURLIN_UNROLL == 2 && SHORT_BATCH > 1
        // Only at U=2, the reductions' default: at U=1 the main loop already
        // loads 8 sources a round, and at U=4 it leaves no registers for this
        // path (ptxas spills).
        if (IS_REDUCE(kind) && nvec <= stride) {
            if (tid < nvec)
                reduce_one_vector(nsrc, ndst, src, dst, (head + tid * VEC) * (i64)sizeof(S), split == SPLIT_VECTORS);
        } else
#endif
        for (i64 v = tid; v < nvec; v += stride * U) {
            Vec out[U];
            if (!IS_REDUCE(kind)) {
                load_vecs<U>(out, src[0], head, v, stride, nvec);
            } else {
                // Sources are loaded G at a time, all G*U vectors issued before
                // the first is combined: a thread waits once per batch rather
                // than once per source, which is what keeps enough bytes in
                // flight to reach HBM bandwidth with one block per SM.
                A sum[U][16 / sizeof(S)];
                Vec x[G][U];
                load_batch<G, U>(x, src, 0, nsrc, head, v, stride, nvec);
#pragma unroll
                for (int k = 0; k < U; ++k)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) sum[k][e] = Elem::up(x[0][k].s[e]);
                combine_batch<G, U>(sum, x, 1, nsrc);
                for (int s0 = G; s0 < nsrc; s0 += G) {
                    load_batch<G, U>(x, src, s0, nsrc, head, v, stride, nvec);
                    combine_batch<G, U>(sum, x, 0, nsrc - s0);
                }
#pragma unroll
                for (int k = 0; k < U; ++k)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) out[k].s[e] = Elem::down(sum[k][e]);
            }
#if PURLIN_COPY_ONLY && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#pragma unroll 1  // sm_100's ptxas unrolls this into a spill in the copy-only build
#endif
            for (int d = 0; d < ndst; ++d) {
#pragma unroll
                for (int k = 0; k < U; ++k) {
                    i64 at = v + k * stride;
                    if (at >= nvec) continue;
                    char* to = dst[d] + (head + at * VEC) * sizeof(S);
                    if (split == SPLIT_VECTORS || !HAS_SPLIT_LOADS) {
                        st_vec(to, out[k].u);
                    } else {
#pragma unroll
                        for (int e = 0; e < VEC; ++e) ((S*)to)[e] = out[k].s[e];
                    }
                }
            }
        }
        // Scalar edges: [0, head) and [tail, count).
        i64 edges = head + (count - tail);
        for (i64 j = tid; j < edges; j += stride) move_one(kind, j < head ? j : tail + (j - head), nsrc, ndst, src, dst);
        return;
    }
    // Sources disagree modulo 16 bytes: element by element. A copy issues
    // ELEM_BATCH loads a thread before its first store: one at a time, a
    // thread waited a memory round trip per element, and variable-size
    // copies (slices at any element offset) ran at 0.55x torch's index copy.
    // A reduction already has its sources' loads in flight together (move_one).
    if (!IS_REDUCE(kind)) {
        for (i64 i0 = tid; i0 < count; i0 += stride * ELEM_BATCH) {
            S x[ELEM_BATCH];
#pragma unroll
            for (int k = 0; k < ELEM_BATCH; ++k)
                if (i0 + k * stride < count) x[k] = ld_one<S>((const S*)src[0] + i0 + k * stride);
            for (int d = 0; d < ndst; ++d)
#pragma unroll
                for (int k = 0; k < ELEM_BATCH; ++k)
                    if (i0 + k * stride < count) ((S*)dst[d])[i0 + k * stride] = x[k];
        }
    } else {
        for (i64 i = tid; i < count; i += stride) move_one(kind, i, nsrc, ndst, src, dst);
    }
}

// ---------------------------------------------------------------------- kernel
#ifndef PURLIN_UNROLL
#define PURLIN_UNROLL 2
#endif
#ifndef PURLIN_MAX_THREADS
#define PURLIN_MAX_THREADS 512
#endif
// Blocks per SM the compiler must fit: 512 threads' worth, i.e. at most 128
// registers a thread, which the reduce path of every dtype needs to stay out
// of local memory (tests/test_atoms_compile.py checks for spills).
#ifndef PURLIN_MIN_BLOCKS
#define PURLIN_MIN_BLOCKS (512 / PURLIN_MAX_THREADS > 0 ? 512 / PURLIN_MAX_THREADS : 1)
#endif

extern "C" __global__ void __launch_bounds__(PURLIN_MAX_THREADS, PURLIN_MIN_BLOCKS) snac_run(
    const Op* __restrict__ ops, const Group* __restrict__ groups, char* const* __restrict__ bases,
    u64* __restrict__ epochs, i64* status, int* abort_flag, u64 timeout_ns, int blocks_per_group, int nbases,
    const i64* __restrict__ counts, const int* __restrict__ vt) {
    // Shared state is double-buffered by op parity: a thread may start op o+1
    // while a slower one still reads op o's pointers, but never op o-1's (every
    // op passes one barrier), so op o+1 can reuse op o-1's half with no barrier.
    __shared__ char* s_src[2][MAX_SRC];
    __shared__ char* s_dst[2][MAX_DST];
    __shared__ int s_abort[2];

    const int B = blocks_per_group;
    const Group g = groups[blockIdx.x / B];
    const int bi = blockIdx.x % B;
    const u64 epoch = epochs[blockIdx.x] + 1;
    const u64 target = epoch * (u64)B;
    const i64 tid = (i64)bi * blockDim.x + threadIdx.x;
    const i64 stride = (i64)B * blockDim.x;
    // The slice base table, fetched while the group's first op is still
    // being read: resolving an address is then a shared-memory lookup, one
    // global round trip less on every op's critical path.
    __shared__ char* s_bases[MAX_SHARED_BASES];
    const bool shared_bases = nbases <= MAX_SHARED_BASES;
    if (shared_bases)
        for (int t = threadIdx.x; t < nbases; t += blockDim.x) s_bases[t] = bases[t];
    __syncthreads();
    char* const* base_of = shared_bases ? (char* const*)s_bases : bases;
#if PURLIN_VARIABLE
    check_counts(vt, counts, status);
#endif

    for (int o = g.begin; o < g.end; ++o) {
        const Op* op = ops + o;
        const int half = o & 1;
        const int nwait = op->nwait, kind = op->op, nsrc = op->nsrc, ndst = op->ndst;
        jitter(epoch, op->step, 0);
        if (threadIdx.x == 0) {
            int aborted = 0;
            if (nwait) jitter(epoch, op->step, 1);
            for (int w = 0; w < nwait && !aborted; ++w) {
                const u64* flag = (const u64*)op->wait[w];
                u64 start = now_ns(), seen = 0;
                for (u32 spin = 1;; ++spin) {
                    seen = ld_acquire(flag);
                    if (seen >= target) break;
                    if ((spin & 255u) == 0) {
                        if (*(volatile int*)abort_flag) { aborted = 1; break; }
                        u64 waited = now_ns() - start;
                        if (waited > timeout_ns) {
                            if (atomicCAS(abort_flag, 0, 1) == 0) {
                                status[1] = g.rank; status[2] = g.channel; status[3] = op->step;
                                status[4] = op->wait_id[w]; status[5] = (i64)seen; status[6] = (i64)target;
                                status[7] = (i64)waited;
                                __threadfence_system();
                                *(volatile i64*)status = ST_TIMEOUT;
                            }
                            aborted = 1;
                            break;
                        }
                    }
                }
            }
            s_abort[half] = aborted;
        }
        // Threads 0..nsrc+ndst-1 resolve one slice address each; the split
        // (split_of) follows their offsets within 16 bytes.
#if PURLIN_VARIABLE
        // Sizes from the call's counts: thread 0 clips the op's count, each
        // slice's thread moves it past the counts before it; the alignment
        // is checked after the barrier, from shared memory (worked out
        // before it, as below, the registers held across it spilled).
        __shared__ i64 s_count[2];
        if (kind != OP_NONE) {
            const int* rec = vt + vt[1] + (i64)o * VAR_RECORD;
            if (threadIdx.x == 0) {  // the window [at, at + count) of the clipping count
                const i64 window = op->count, left = rec[0] < 0 ? window : var_count(vt, counts, rec[0]) - rec[1];
                s_count[half] = left < 0 ? 0 : (left < window ? left : window);
            }
            if (threadIdx.x < nsrc + ndst) {
                const int k = threadIdx.x;
                const i64 ref = k < nsrc ? op->src[k] : op->dst[k - nsrc];
                const i64 at = (ref & ((1ll << OFFSET_BITS) - 1)) + var_shift(vt, counts, rec, k);
                char* p = base_of[ref >> OFFSET_BITS] + at * (i64)sizeof(S);
                if (k < nsrc) s_src[half][k] = p; else s_dst[half][k - nsrc] = p;
            }
        }
        __syncthreads();
        if (s_abort[half]) {
            if (threadIdx.x == 0) mark_aborted(status);
            return;
        }
        if (kind != OP_NONE) {
            const i64 count = s_count[half];
            const u64 mis = (u64)s_src[half][0] & 15u;
            bool srcs = true, all = true;
            for (int k = 1; k < nsrc; ++k) srcs &= ((u64)s_src[half][k] & 15u) == mis;
            for (int k = 0; k < ndst && srcs; ++k) all &= ((u64)s_dst[half][k] & 15u) == mis;
            const int split = split_of(mis, srcs, srcs && all, ndst);
            move_op<PURLIN_UNROLL>(kind, count, nsrc, ndst, s_src[half], s_dst[half], split, head_of(split, mis, count),
                                   tid, stride);
        }
#else
        int same = 1;
        i64 mis = 0;
        if (kind != OP_NONE) {
            const i64 first = op->src[0];
            mis = (i64)(((u64)base_of[first >> OFFSET_BITS] + (first & ((1ll << OFFSET_BITS) - 1)) * sizeof(S)) & 15u);
            if (threadIdx.x < nsrc + ndst) {
                const int k = threadIdx.x;
                const i64 ref = k < nsrc ? op->src[k] : op->dst[k - nsrc];
                char* p = base_of[ref >> OFFSET_BITS] + (ref & ((1ll << OFFSET_BITS) - 1)) * (i64)sizeof(S);
                if (k < nsrc) s_src[half][k] = p; else s_dst[half][k - nsrc] = p;
                same = ((u64)p & 15u) == (u64)mis;
            }
        }
        const int all = __syncthreads_and(same);
        if (s_abort[half]) {
            if (threadIdx.x == 0) mark_aborted(status);
            return;
        }
        if (kind != OP_NONE) {
            const i64 count = op->count;
            // A fixed program's build has no SPLIT_LOADS: whether every slice agrees decides.
            const int split = split_of(mis, all, all, ndst);
            move_op<PURLIN_UNROLL>(kind, count, nsrc, ndst, s_src[half], s_dst[half], split, head_of(split, mis, count),
                                   tid, stride);
        }
#endif
        if (op->nnotify) {
            __syncthreads();  // the whole block's writes happen before the release
            if (threadIdx.x == 0) {
                jitter(epoch, op->step, 2);
                fence_release();
                for (int k = 0; k < op->nnotify; ++k) red_release((u64*)op->notify[k]);
            }
        }
    }
    if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}
