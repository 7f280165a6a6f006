/* An invalid collective call found by the simulator: PEs allocate different sizes. */
#include <shmem.h>
int main(void) {
    shmem_init();
    void *p = shmem_malloc(shmem_my_pe() == 0 ? 64 : 128);
    shmem_free(p);
    shmem_finalize();
    return 0;
}
