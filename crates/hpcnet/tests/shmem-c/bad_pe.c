/* An invalid call: a PE outside the job. */
#include <shmem.h>
static long x;
int main(void) {
    shmem_init();
    shmem_long_p(&x, 1, shmem_n_pes() + 3);
    shmem_finalize();
    return 0;
}
