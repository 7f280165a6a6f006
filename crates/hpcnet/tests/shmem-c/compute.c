/* Host computation between two reads of the (simulated) clock, with no SHMEM call between. */
#include <shmem.h>
#include <stdio.h>
#include <time.h>

static volatile double sink;

int main(void) {
    shmem_init();
    struct timespec a, b, c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* About 20 ms of CPU, whatever the host's speed. */
    do {
        for (int i = 0; i < 100000; i++) sink += i * 0.5;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    } while ((c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6 < 20.0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double sim_us = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
    if (shmem_my_pe() == 0) printf("simulated %.3f us\n", sim_us);
    shmem_finalize();
    return 0;
}
