/* latency: OSU-style put ping-pong between PE 0 and PE 1 (data, fence, flag; the peer waits
 * for the flag and answers alike; latency is half the round trip), then blocking get latency.
 * Timed with clock_gettime, as benchmarks do. Usage: latency [ITERATIONS] [MAX_SIZE] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long flag;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    size_t max = argc > 2 ? (size_t)atol(argv[2]) : 4096;
    shmem_init();
    int me = shmem_my_pe();
    if (shmem_n_pes() < 2) {
        if (me == 0) printf("latency needs 2 PEs\n");
        shmem_finalize();
        return 1;
    }
    char *buf = shmem_malloc(max);
    char *data = malloc(max);
    memset(data, 0x5a, max);
    long seq = 0;
    if (me == 0) printf("# put latency (ping-pong, half round trip)\n# %8s %12s\n", "bytes", "latency_us");
    for (size_t size = 8; size <= max; size *= 2) {
        shmem_barrier_all();
        double t0 = now_us();
        for (int i = 0; i < iters; i++) {
            seq++;
            if (me == 0) {
                shmem_putmem(buf, data, size, 1);
                shmem_fence();
                shmem_long_p(&flag, seq, 1);
                shmem_long_wait_until(&flag, SHMEM_CMP_GE, seq);
            } else if (me == 1) {
                shmem_long_wait_until(&flag, SHMEM_CMP_GE, seq);
                shmem_putmem(buf, data, size, 0);
                shmem_fence();
                shmem_long_p(&flag, seq, 0);
            }
        }
        double t = now_us() - t0;
        if (me == 0) printf("put %8zu %12.3f\n", size, t / (2.0 * iters));
    }
    if (me == 0) printf("# get latency (blocking shmem_getmem)\n");
    for (size_t size = 8; size <= max; size *= 2) {
        shmem_barrier_all();
        if (me == 0) {
            double t0 = now_us();
            for (int i = 0; i < iters; i++) shmem_getmem(data, buf, size, 1);
            printf("get %8zu %12.3f\n", size, (now_us() - t0) / iters);
        }
    }
    /* The last message of the ping-pong really arrived. */
    int ok = buf[max > 8 ? 7 : 0] == 0x5a;
    shmem_barrier_all();
    if (me == 0) printf("data %s\n", ok ? "ok" : "WRONG");
    shmem_free(buf);
    free(data);
    shmem_finalize();
    return ok ? 0 : 1;
}
