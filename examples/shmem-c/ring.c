/* ring: a token goes round the PEs LAPS times; each PE adds its number and passes it on with
 * a put and a flag (put, fence, flag), waiting for its own flag with shmem_wait_until.
 * Usage: ring [LAPS] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long token;
static long flag;

int main(int argc, char **argv) {
    int laps = argc > 1 ? atoi(argv[1]) : 3;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int next = (me + 1) % npes;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long lap = 1; lap <= laps; lap++) {
        if (me == 0 && lap == 1) token = 0;
        if (!(me == 0 && lap == 1)) shmem_long_wait_until(&flag, SHMEM_CMP_GE, me == 0 ? lap - 1 : lap);
        long v = token + me;
        shmem_long_put(&token, &v, 1, next);
        shmem_fence();
        shmem_long_p(&flag, lap, next);
    }
    if (me == 0) shmem_long_wait_until(&flag, SHMEM_CMP_GE, laps);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    shmem_barrier_all();
    int ok = 1;
    if (me == 0) {
        long want = (long)laps * npes * (npes - 1) / 2;
        double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
        ok = token == want;
        printf("ring: %d laps over %d PEs, token %ld (want %ld) %s, %.3f us per hop\n", laps, npes, token, want,
               ok ? "ok" : "WRONG", us / ((double)laps * npes));
    }
    shmem_finalize();
    return ok ? 0 : 1;
}
