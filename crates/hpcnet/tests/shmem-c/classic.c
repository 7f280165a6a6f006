/* An OpenSHMEM 1.0-style program: start_pes, _my_pe, shmalloc, deprecated AMO and wait names,
 * reductions with pWrk/pSync, active-set barriers; compiled as C99 (no _Generic). */
#include <shmem.h>
#include <stdio.h>

long pSync[_SHMEM_REDUCE_SYNC_SIZE];
long pWrk[_SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long total, mine, ticket, go;

int main(void) {
    int i;
    start_pes(0);
    int me = _my_pe(), n = _num_pes();
    for (i = 0; i < _SHMEM_REDUCE_SYNC_SIZE; i++) pSync[i] = _SHMEM_SYNC_VALUE;
    long *arr = (long *)shmalloc(n * sizeof(long));
    for (i = 0; i < n; i++) arr[i] = -1;
    shmem_barrier_all();
    for (i = 0; i < n; i++) shmem_long_p(&arr[me], me * 10, i);
    long t = shmem_long_finc(&ticket, 0);
    shmem_barrier_all();
    int ok = 1;
    for (i = 0; i < n; i++) ok &= arr[i] == i * 10;
    mine = me + 1;
    shmem_long_sum_to_all(&total, &mine, 1, 0, 0, n, pWrk, pSync);
    ok &= total == (long)n * (n + 1) / 2;
    if (me == 0) {
        shmem_wait_until(&ticket, _SHMEM_CMP_EQ, n);
        for (i = 1; i < n; i++) shmem_long_p(&go, 1, i);
    } else {
        shmem_wait(&go, 0);
    }
    ok &= t >= 0 && t < n;
    shmem_barrier(0, 0, n, pSync);
    printf("classic PE %d of %d: %s\n", me, n, ok ? "ok" : "WRONG");
    shfree(arr);
    return ok ? 0 : 1; /* no shmem_finalize: the library finalizes at exit */
}
