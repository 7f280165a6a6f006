/* A PE that crashes in the middle of the job while the others wait in a barrier. */
#include <shmem.h>
#include <stdio.h>
int main(void) {
    shmem_init();
    if (shmem_my_pe() == 1) {
        volatile int *p = (int *)(uintptr_t)(shmem_my_pe() - 1); /* NULL */
        *p = 1;
    }
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
