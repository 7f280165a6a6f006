/* hello: every PE reports itself, puts its number into a static array of its right neighbour
 * and into a shmem_malloc'd buffer, then checks what it received. */
#include <shmem.h>
#include <stdio.h>

static long from_left;           /* symmetric: a static variable */
long seen[2] = {-1, -1};         /* symmetric: an initialised global */

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long *box = shmem_malloc(sizeof(long)); /* symmetric: the heap */
    *box = -1;
    shmem_barrier_all();
    int right = (me + 1) % npes;
    long v = me;
    shmem_long_put(&from_left, &v, 1, right);
    shmem_long_p(box, 100 + me, right);
    shmem_barrier_all();
    seen[0] = shmem_long_g(&from_left, right); /* what the right neighbour got from me */
    int left = (me + npes - 1) % npes;
    int ok = from_left == left && *box == 100 + left && seen[0] == me;
    printf("Hello from PE %d of %d: got %ld and %ld from PE %d: %s\n", me, npes, from_left, *box, left,
           ok ? "ok" : "WRONG");
    shmem_free(box);
    shmem_finalize();
    return ok ? 0 : 1;
}
