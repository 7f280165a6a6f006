/* An invalid call: an atomic on a misaligned address. */
#include <shmem.h>
static char bytes[32];
int main(void) {
    shmem_init();
    shmem_barrier_all();
    if (shmem_my_pe() == 0) shmem_long_atomic_add((long *)(bytes + 3), 1, 1);
    shmem_finalize();
    return 0;
}
