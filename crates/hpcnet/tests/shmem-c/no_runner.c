#include <shmem.h>
int main(void) {
    shmem_init();
    return 0;
}
