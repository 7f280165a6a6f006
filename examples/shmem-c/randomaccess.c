/* randomaccess: HPCC RandomAccess (GUPS) on OpenSHMEM. A table of 2^LOG_LOCAL 64-bit words per
 * PE (the PE count must be a power of two) starts as table[i] = global index i; every PE
 * applies 4 × (its table size) updates from the HPCC random stream, each a remote atomic xor at
 * the word's owner. Verification as HPCC does it: the same updates applied again must give the
 * starting table back; at most 1 % of the words may differ.
 * Usage: randomaccess [LOG_LOCAL] */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define POLY 0x0000000000000007ULL
#define PERIOD 1317624576693539401LL

/* The n-th number of the HPCC random stream (HPCC's HPCC_starts). */
static uint64_t starts(int64_t n) {
    uint64_t m2[64];
    while (n < 0) n += PERIOD;
    while (n > PERIOD) n -= PERIOD;
    if (n == 0) return 0x1;
    uint64_t temp = 0x1;
    for (int i = 0; i < 64; i++) {
        m2[i] = temp;
        temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
        temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
    }
    int i;
    for (i = 62; i >= 0; i--)
        if ((n >> i) & 1) break;
    uint64_t ran = 0x2;
    while (i > 0) {
        temp = 0;
        for (int j = 0; j < 64; j++)
            if ((ran >> j) & 1) temp ^= m2[j];
        ran = temp;
        i -= 1;
        if ((n >> i) & 1) ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
    }
    return ran;
}

static void update(uint64_t *table, int log_local, int log_pes, uint64_t first, int64_t count) {
    uint64_t ran = first;
    uint64_t local_mask = (1ULL << log_local) - 1;
    for (int64_t i = 0; i < count; i++) {
        ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
        uint64_t index = ran & ((1ULL << (log_local + log_pes)) - 1);
        int owner = (int)(index >> log_local);
        shmem_uint64_atomic_xor(&table[index & local_mask], ran, owner);
    }
}

int main(int argc, char **argv) {
    int log_local = argc > 1 ? atoi(argv[1]) : 10;
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int log_pes = 0;
    while ((1 << log_pes) < npes) log_pes++;
    if ((1 << log_pes) != npes) {
        if (me == 0) printf("randomaccess needs a power-of-two number of PEs\n");
        shmem_finalize();
        return 1;
    }
    uint64_t local = 1ULL << log_local;
    uint64_t *table = shmem_malloc(local * sizeof(uint64_t));
    for (uint64_t i = 0; i < local; i++) table[i] = ((uint64_t)me << log_local) + i;
    int64_t per_pe = 4 * (int64_t)local;
    uint64_t first = starts(per_pe * me);
    shmem_barrier_all();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    update(table, log_local, log_pes, first, per_pe);
    shmem_barrier_all();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    /* Verification: undo every update, then count the words that differ. */
    update(table, log_local, log_pes, first, per_pe);
    shmem_barrier_all();
    static long errors, total_errors;
    for (uint64_t i = 0; i < local; i++) errors += table[i] != ((uint64_t)me << log_local) + i;
    static long pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    static long pSync[SHMEM_REDUCE_SYNC_SIZE];
    shmem_long_sum_to_all(&total_errors, &errors, 1, 0, 0, npes, pWrk, pSync);
    uint64_t words = local * (uint64_t)npes;
    int passed = total_errors <= 0.01 * (double)words;
    if (me == 0) {
        printf("table %llu words on %d PEs, %lld updates in %.6f s (simulated): %.6f GUPS\n",
               (unsigned long long)words, npes, (long long)(per_pe * npes), secs, per_pe * npes / secs / 1e9);
        printf("verification: %ld of %llu words wrong: %s\n", total_errors, (unsigned long long)words,
               passed ? "PASSED" : "FAILED");
    }
    shmem_free(table);
    shmem_finalize();
    return passed ? 0 : 1;
}
