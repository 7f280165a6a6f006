/* A program that can never finish: every PE waits for a flag nobody sets. */
#include <shmem.h>
static long flag;
int main(void) {
    shmem_init();
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);
    shmem_finalize();
    return 0;
}
