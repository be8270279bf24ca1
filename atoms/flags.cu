// The compiled datapath's flag lists (codegen/compiled.py inserts this after
// snac.cu's primitives, whose ld_acquire, red_release, fence_release, now_ns
// and ST_TIMEOUT it uses).

// Thread w < N of a step's list takes flag w by selects, with no branch a
// thread. With one branch a thread a warp ran its N polls one after another,
// and its N releases too, each a system fence; ipc's kernel, whose flag hop
// costs a third of ours at 8 processes under MPS, runs one loop over
// per-thread addresses (issue 30, session 18: what this saves there is not
// measured yet). Selects, not an index by thread, which would put the list in
// local memory.
template <int N>
__device__ __forceinline__ u64* purlin_pick(u64* const (&flags)[N]) {
    u64* mine = flags[0];
#pragma unroll
    for (int w = 1; w < N; ++w) mine = threadIdx.x == (unsigned)w ? flags[w] : mine;
    return mine;
}

// Threads 0..N-1 bump the N flags together, each after its own release fence
// (system scope, or GPU scope where PURLIN_SYS_SCOPE is 0).
template <int N>
__device__ __forceinline__ void purlin_release(u64* const (&flags)[N]) {
    if (threadIdx.x < N) {
        u64* const mine = purlin_pick<N>(flags);
        fence_release();
        red_release(mine);
    }
}

// Thread w < N waits for flag w to reach `target`, all at once: a rank that
// waits on every peer pays one flag round trip, not one a peer in turn.
// Bounded as the interpreter's waits are; 1 when the call aborted (this wait
// timed out, or another's did).
template <int N>
__device__ __forceinline__ int purlin_wait(u64* const (&flags)[N], const int (&ids)[N], u64 target, u64 timeout_ns,
                                           int* abort_flag, i64* status, int rank, int channel, int step) {
    if (threadIdx.x >= N) return 0;
    const u64* const flag = purlin_pick<N>(flags);
    u64 start = now_ns(), seen = 0;
    for (u32 spin = 1;; ++spin) {
        seen = ld_acquire(flag);
        if (seen >= target) return 0;
        if ((spin & 255u) == 0) {
            if (*(volatile int*)abort_flag) return 1;
            u64 waited = now_ns() - start;
            if (waited > timeout_ns) {
                if (atomicCAS(abort_flag, 0, 1) == 0) {
                    int id = ids[0];
#pragma unroll
                    for (int w = 1; w < N; ++w) id = threadIdx.x == (unsigned)w ? ids[w] : id;
                    status[1] = rank; status[2] = channel; status[3] = step;
                    status[4] = id; status[5] = (i64)seen; status[6] = (i64)target;
                    status[7] = (i64)waited;
                    __threadfence_system();
                    *(volatile i64*)status = ST_TIMEOUT;
                }
                return 1;
            }
        }
    }
}
