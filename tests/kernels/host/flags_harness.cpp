// Runs atoms/flags.cu's flag-list helpers on the host, one thread at a time
// (threadIdx.x set by hand, the memory primitives recorded): which flag each
// thread bumps or polls, and what a timed-out wait reports. Built by
// tests/kernels/test_flag_lists.py with -DFLAGS_CU="<path of atoms/flags.cu>".
#include <cstdio>
#include <string>
#include <vector>

#define __device__
#define __forceinline__ inline
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
enum { ST_OK = 0, ST_TIMEOUT = 1 };
struct ThreadIndex { unsigned x; } threadIdx;

static std::vector<const u64*> polled;
static std::vector<u64*> bumped;
static int fences = 0;
static std::string order;  // 'F' a release fence, 'B' a bump, in program order
static u64 clock_ns = 0;
u64 now_ns() { return clock_ns += 1000; }
u64 ld_acquire(const u64* p) { polled.push_back(p); return *p; }
void red_release(u64* p) { bumped.push_back(p); *p += 1; order += 'B'; }
void fence_release() { ++fences; order += 'F'; }
void __threadfence_system() {}
int atomicCAS(int* a, int compare, int value) { int old = *a; if (old == compare) *a = value; return old; }

#include FLAGS_CU

static int failures = 0;
#define EXPECT(cond, n, t, what) \
    if (!(cond)) { ++failures; std::printf("N=%d thread %d: %s\n", n, t, what); }

template <int N>
void check() {
    u64 words[N] = {};
    u64* flags[N];
    int ids[N];
    for (int w = 0; w < N; ++w) { flags[w] = &words[w]; ids[w] = 1000 + 3 * w; }
    u64* const (&list)[N] = flags;
    const int (&id_list)[N] = ids;
    for (int t = 0; t < N + 2; ++t) {
        threadIdx.x = (unsigned)t;
        const bool in_list = t < N;
        bumped.clear(); fences = 0; order.clear();
        purlin_release<N>(list);
        // The fence orders this thread's data before its flag: it comes first.
        EXPECT(order == (in_list ? "FB" : ""), N, t, "fence not before the bump");
        EXPECT(bumped.size() == (in_list ? 1u : 0u), N, t, "bumps");
        if (in_list && bumped.size() == 1) EXPECT(bumped[0] == flags[t], N, t, "bumped another thread's flag");
        EXPECT(fences == (in_list ? 1 : 0), N, t, "fences");
        // Flag t at the target: the wait returns 0 having polled flag t only.
        for (int w = 0; w < N; ++w) words[w] = 0;
        if (in_list) words[t] = 7;
        int abort_word = 0;
        i64 status[8] = {};
        polled.clear();
        int left = purlin_wait<N>(list, id_list, 7, 1u << 20, &abort_word, status, 2, 1, 9);
        EXPECT(left == 0, N, t, "a wait whose flag came reported an abort");
        for (const u64* p : polled) EXPECT(in_list && p == flags[t], N, t, "polled another thread's flag");
        EXPECT(polled.empty() == !in_list, N, t, "polls");
        // Every flag short of the target: the wait times out naming its own flag.
        if (in_list) {
            for (int w = 0; w < N; ++w) words[w] = w == t ? 6 : 7;
            left = purlin_wait<N>(list, id_list, 7, 1, &abort_word, status, 2, 1, 9);
            EXPECT(left == 1 && abort_word == 1 && status[0] == ST_TIMEOUT, N, t, "no timeout");
            EXPECT(status[4] == ids[t] && status[5] == 6 && status[6] == 7, N, t, "timeout names another flag");
            EXPECT(status[1] == 2 && status[2] == 1 && status[3] == 9, N, t, "timeout's rank, channel, step");
            // Another wait aborted first: this one leaves at its first check, before reading the
            // clock again (one now_ns, its start), its report untouched.
            i64 other[8] = {};
            const u64 before = clock_ns;
            left = purlin_wait<N>(list, id_list, 7, 1, &abort_word, other, 2, 1, 9);
            EXPECT(left == 1 && other[0] == ST_OK && other[4] == 0, N, t, "an abort's wait wrote a report");
            EXPECT(clock_ns - before == 1000, N, t, "an abort set elsewhere not honoured");
        }
    }
}

int main() {
    check<1>(); check<2>(); check<7>(); check<31>(); check<32>();
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
