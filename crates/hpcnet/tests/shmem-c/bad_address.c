/* An invalid call: a put whose target is a local (non-symmetric) variable. */
#include <shmem.h>
int main(void) {
    shmem_init();
    long local = 0, v = 1;
    shmem_barrier_all();
    if (shmem_my_pe() == 1) shmem_long_put(&local, &v, 1, 0);
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
