/* barrier: time shmem_barrier_all, and check that no PE leaves a barrier before every PE has
 * entered it (each PE bumps a counter on every PE before the barrier and reads its own after).
 * Usage: barrier [ITERATIONS] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long arrived;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int ok = 1;
    for (int round = 1; round <= 3; round++) {
        for (int p = 0; p < npes; p++) shmem_long_atomic_inc(&arrived, p);
        shmem_barrier_all();
        ok = ok && arrived == (long)round * npes;
        shmem_barrier_all();
    }
    double t0 = now_us();
    for (int i = 0; i < iters; i++) shmem_barrier_all();
    double t = (now_us() - t0) / iters;
    if (me == 0) printf("barrier_all on %d PEs: %.3f us\n", npes, t);
    /* An active set: the even PEs. */
    static long pSync[SHMEM_BARRIER_SYNC_SIZE];
    if (me % 2 == 0) shmem_barrier(0, 1, (npes + 1) / 2, pSync);
    shmem_barrier_all();
    printf("PE %d: barriers %s\n", me, ok ? "ok" : "WRONG");
    shmem_finalize();
    return ok ? 0 : 1;
}
