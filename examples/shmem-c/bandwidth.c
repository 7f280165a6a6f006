/* bandwidth: OSU-style put bandwidth from PE 0 to PE 1: WINDOW non-blocking puts from the
 * symmetric heap, then shmem_quiet, repeated; bytes moved over the time taken.
 * Usage: bandwidth [ITERATIONS] [WINDOW] [MAX_SIZE] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    int window = argc > 2 ? atoi(argv[2]) : 64;
    size_t max = argc > 3 ? (size_t)atol(argv[3]) : 65536;
    shmem_init();
    int me = shmem_my_pe();
    char *src = shmem_malloc(max);
    char *dst = shmem_malloc(max);
    memset(src, 'a' + me, max);
    memset(dst, 0, max);
    shmem_barrier_all();
    if (me == 0) printf("# %8s %12s %14s\n", "bytes", "GB/s", "messages/s");
    for (size_t size = 8; size <= max; size *= 4) {
        shmem_barrier_all();
        if (me == 0) {
            double t0 = now_s();
            for (int i = 0; i < iters; i++) {
                for (int w = 0; w < window; w++) shmem_putmem_nbi(dst, src, size, 1);
                shmem_quiet();
            }
            double t = now_s() - t0;
            double n = (double)iters * window;
            printf("  %8zu %12.3f %14.0f\n", size, n * size / t / 1e9, n / t);
        }
    }
    shmem_barrier_all();
    int ok = me != 1 || (dst[0] == 'a' && dst[max - 1] == 'a');
    if (me == 1) printf("data %s\n", ok ? "ok" : "WRONG");
    shmem_finalize();
    return ok ? 0 : 1;
}
