/* atomics: every PE increments a counter on PE 0 with fetch-and-increment (each value is handed
 * out exactly once), xors its bit into a mask and swaps into a slot; then PE 0 checks the
 * results and times remote fetch-and-add. Usage: atomics [ITERATIONS] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long counter;
static unsigned long mask;
static int slot = -1;
static long seen[64 * 1024];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    if ((long)iters * npes > (long)(sizeof seen / sizeof seen[0])) iters = (int)(sizeof seen / sizeof seen[0]) / npes;
    /* Every fetched value goes to PE 0's record of who got it. */
    for (int i = 0; i < iters; i++) {
        long v = shmem_long_atomic_fetch_inc(&counter, 0);
        shmem_long_p(&seen[v], me + 1, 0);
    }
    shmem_ulong_atomic_xor(&mask, 1ul << (me % 64), 0);
    int old = shmem_int_atomic_swap(&slot, me, 0);
    shmem_barrier_all();
    int ok = 1;
    if (me == 0) {
        long total = (long)iters * npes;
        long missing = 0;
        for (long i = 0; i < total; i++) missing += seen[i] == 0;
        unsigned long want = 0;
        for (int p = 0; p < npes; p++) want ^= 1ul << (p % 64);
        ok = counter == total && missing == 0 && mask == want && slot >= 0 && slot < npes;
        printf("fetch_inc: counter %ld of %ld, every value handed out once: %s\n", counter, total,
               missing == 0 ? "yes" : "NO");
        printf("xor mask %#lx (want %#lx), swap left PE %d in the slot\n", mask, want, slot);
        /* compare_swap only succeeds with the right expectation. */
        long c = shmem_long_atomic_compare_swap(&counter, 12345, 0, npes - 1);
        long d = shmem_long_atomic_compare_swap(&counter, c, -1, npes - 1);
        long e = shmem_long_atomic_fetch(&counter, npes - 1);
        ok = ok && c == d && e == -1;
        printf("compare_swap: %s\n", c == d && e == -1 ? "ok" : "WRONG");
        double t0 = now_us();
        for (int i = 0; i < iters; i++) shmem_long_atomic_fetch_add(&counter, 1, npes - 1);
        printf("fetch_add latency to PE %d: %.3f us\n", npes - 1, (now_us() - t0) / iters);
    }
    (void)old;
    shmem_barrier_all();
    if (me == 0) printf("atomics %s\n", ok ? "ok" : "FAILED");
    shmem_finalize();
    return ok ? 0 : 1;
}
