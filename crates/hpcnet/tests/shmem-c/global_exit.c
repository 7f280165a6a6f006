/* shmem_global_exit from one PE ends every PE with that status. */
#include <shmem.h>
#include <stdio.h>
static long flag;
int main(void) {
    shmem_init();
    if (shmem_my_pe() == 0) {
        printf("PE 0 leaves the job\n");
        shmem_global_exit(7);
    }
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 1);
    return 0;
}
