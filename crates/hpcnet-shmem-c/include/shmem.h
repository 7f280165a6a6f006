/*
 * shmem.h — OpenSHMEM 1.5 C interface of hpcnet.
 *
 * Programs written against this header run as one simulated job on an hpcnet scenario:
 *
 *     hpcnet shmem-cc prog.c -o prog                      # compile and link (like oshcc)
 *     hpcnet shmem-run scenarios/nicevt-m3.toml --pes 4 -- ./prog args
 *
 * Every call below is carried out by the simulator's OpenSHMEM library (hpcnet-shmem) on the
 * scenario's NIC and network models; its data really moves between the PEs' processes.
 * Symmetric objects are the program's global and static variables and the memory of
 * shmem_malloc and friends. Deprecated names of earlier versions (start_pes, shmalloc,
 * _my_pe, shmem_int_fadd, shmem_*_to_all, ...) are kept. Not provided: contexts
 * (shmem_ctx_*), long double and complex reductions, short reductions.
 */
#ifndef HPCNET_SHMEM_H
#define HPCNET_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define SHMEM_MAX_NAME_LEN 256
#define SHMEM_VENDOR_STRING "hpcnet OpenSHMEM (simulated)"
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_LE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_GE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_LE SHMEM_CMP_LE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_GE SHMEM_CMP_GE

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

/* pSync/pWrk arrays are accepted and not used: the library keeps its own synchronisation. */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 8
#define SHMEM_BCAST_SYNC_SIZE 8
#define SHMEM_BARRIER_SYNC_SIZE 8
#define SHMEM_REDUCE_SYNC_SIZE 8
#define SHMEM_COLLECT_SYNC_SIZE 8
#define SHMEM_ALLTOALL_SYNC_SIZE 8
#define SHMEM_ALLTOALLS_SYNC_SIZE 8
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 8
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

/* ---- type lists (name, C type) -------------------------------------------------------- */

/* Standard RMA types (OpenSHMEM 1.5, table 5). */
#define HPCNET_RMA_TYPES(X) \
    X(float, float) X(double, double) X(longdouble, long double) X(char, char) \
    X(schar, signed char) X(short, short) X(int, int) X(long, long) X(longlong, long long) \
    X(uchar, unsigned char) X(ushort, unsigned short) X(uint, unsigned int) \
    X(ulong, unsigned long) X(ulonglong, unsigned long long) X(int8, int8_t) \
    X(int16, int16_t) X(int32, int32_t) X(int64, int64_t) X(uint8, uint8_t) \
    X(uint16, uint16_t) X(uint32, uint32_t) X(uint64, uint64_t) X(size, size_t) \
    X(ptrdiff, ptrdiff_t)

/* Standard AMO types (table 6); the extended AMOs (fetch, set, swap) take float and double too. */
#define HPCNET_AMO_TYPES(X) \
    X(int, int) X(long, long) X(longlong, long long) X(uint, unsigned int) \
    X(ulong, unsigned long) X(ulonglong, unsigned long long) X(int32, int32_t) \
    X(int64, int64_t) X(uint32, uint32_t) X(uint64, uint64_t) X(size, size_t) \
    X(ptrdiff, ptrdiff_t)
#define HPCNET_EXT_AMO_TYPES(X) HPCNET_AMO_TYPES(X) X(float, float) X(double, double)

/* Point-to-point synchronisation types (table 9). */
#define HPCNET_SYNC_TYPES(X) \
    X(short, short) X(int, int) X(long, long) X(longlong, long long) \
    X(ushort, unsigned short) X(uint, unsigned int) X(ulong, unsigned long) \
    X(ulonglong, unsigned long long) X(int32, int32_t) X(int64, int64_t) \
    X(uint32, uint32_t) X(uint64, uint64_t) X(size, size_t) X(ptrdiff, ptrdiff_t)

/* Reduction types this library has (the collectives layer reduces 32/64-bit integers and
 * floating point). */
#define HPCNET_BITWISE_REDUCE_TYPES(X) X(int, int) X(long, long) X(longlong, long long) \
    X(int32, int32_t) X(int64, int64_t)
#define HPCNET_ARITH_REDUCE_TYPES(X) HPCNET_BITWISE_REDUCE_TYPES(X) X(float, float) X(double, double)

#define HPCNET_SIZES(X) X(8, 1) X(16, 2) X(32, 4) X(64, 8) X(128, 16)

/* ---- library setup, query, memory ------------------------------------------------------ */

void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);

/* Collective; NULL on every PE when the symmetric heap has no room. */
void *shmem_malloc(size_t size);
void *shmem_malloc_with_hints(size_t size, long hints);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);

/* Deprecated (OpenSHMEM 1.0–1.3). */
void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);
void *shmalloc(size_t size);
void *shmemalign(size_t alignment, size_t size);
void *shrealloc(void *ptr, size_t size);
void shfree(void *ptr);
void shmem_clear_cache_inv(void);
void shmem_set_cache_inv(void);
void shmem_clear_cache_line_inv(void *dest);
void shmem_set_cache_line_inv(void *dest);
void shmem_udcflush(void);
void shmem_udcflush_line(void *dest);

/* ---- teams ----------------------------------------------------------------------------- */

typedef struct hpcnet_team *shmem_team_t;
typedef struct {
    int num_contexts;
} shmem_team_config_t;
extern struct hpcnet_team hpcnet_team_world, hpcnet_team_shared;
#define SHMEM_TEAM_WORLD (&hpcnet_team_world)
/* The PEs whose memory this PE can load and store (shmem_ptr): only itself here. */
#define SHMEM_TEAM_SHARED (&hpcnet_team_shared)
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_NUM_CONTEXTS 1L

int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask, shmem_team_t *new_team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
void shmem_team_destroy(shmem_team_t team);
int shmem_team_sync(shmem_team_t team);

/* ---- remote memory access -------------------------------------------------------------- */

#define HPCNET_DECL_RMA(N, T) \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_p(T *dest, T value, int pe); \
    T shmem_##N##_g(const T *source, int pe); \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, \
                                uint64_t signal, int sig_op, int pe); \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, \
                                    uint64_t signal, int sig_op, int pe);
HPCNET_RMA_TYPES(HPCNET_DECL_RMA)

#define HPCNET_DECL_SIZED(B, W) \
    void shmem_put##B(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##B(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_put##B##_nbi(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##B##_nbi(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_iput##B(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_iget##B(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_put##B##_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, \
                               uint64_t signal, int sig_op, int pe); \
    void shmem_put##B##_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, \
                                   uint64_t signal, int sig_op, int pe);
HPCNET_SIZES(HPCNET_DECL_SIZED)

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal,
                         int sig_op, int pe);
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                             uint64_t signal, int sig_op, int pe);
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);

/* ---- atomics --------------------------------------------------------------------------- */

#define HPCNET_DECL_EXT_AMO(N, T) \
    T shmem_##N##_atomic_fetch(const T *source, int pe); \
    void shmem_##N##_atomic_set(T *dest, T value, int pe); \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe); \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe);
HPCNET_EXT_AMO_TYPES(HPCNET_DECL_EXT_AMO)

#define HPCNET_DECL_AMO(N, T) \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe); \
    void shmem_##N##_atomic_add(T *dest, T value, int pe); \
    void shmem_##N##_atomic_inc(T *dest, int pe); \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe); \
    void shmem_##N##_atomic_and(T *dest, T value, int pe); \
    void shmem_##N##_atomic_or(T *dest, T value, int pe); \
    void shmem_##N##_atomic_xor(T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_and(T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_or(T *dest, T value, int pe); \
    T shmem_##N##_atomic_fetch_xor(T *dest, T value, int pe); \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe); \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe);
HPCNET_AMO_TYPES(HPCNET_DECL_AMO)

/* Deprecated AMO names (OpenSHMEM 1.0–1.3). */
#define HPCNET_DECL_OLD_AMO(N, T) \
    T shmem_##N##_fadd(T *dest, T value, int pe); \
    T shmem_##N##_finc(T *dest, int pe); \
    void shmem_##N##_add(T *dest, T value, int pe); \
    void shmem_##N##_inc(T *dest, int pe); \
    T shmem_##N##_cswap(T *dest, T cond, T value, int pe);
#define HPCNET_DECL_OLD_EXT(N, T) \
    T shmem_##N##_swap(T *dest, T value, int pe); \
    T shmem_##N##_fetch(const T *source, int pe); \
    void shmem_##N##_set(T *dest, T value, int pe);
#define HPCNET_OLD_AMO_TYPES(X) X(int, int) X(long, long) X(longlong, long long)
HPCNET_OLD_AMO_TYPES(HPCNET_DECL_OLD_AMO)
HPCNET_OLD_AMO_TYPES(HPCNET_DECL_OLD_EXT)
HPCNET_DECL_OLD_EXT(float, float)
HPCNET_DECL_OLD_EXT(double, double)
long shmem_swap(long *dest, long value, int pe);

/* ---- ordering, barriers, synchronisation ----------------------------------------------- */

void shmem_fence(void);
void shmem_quiet(void);
void shmem_barrier_all(void);
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_sync_all(void);
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);

#define HPCNET_DECL_SYNC(N, T) \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value); \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, \
                                       T cmp_value); \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value); \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, \
                                 T cmp_value); \
    void shmem_##N##_wait(T *ivar, T cmp_value);
HPCNET_SYNC_TYPES(HPCNET_DECL_SYNC)
void shmem_wait(long *ivar, long cmp_value);
/* Deprecated untyped form (long); a C11 program gets the generic shmem_wait_until below. */
void shmem_wait_until(long *ivar, int cmp, long cmp_value);

void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* ---- collectives ----------------------------------------------------------------------- */

void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start,
                       int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start,
                       int logPE_stride, int PE_size, long *pSync);
void shmem_collect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                     int PE_size, long *pSync);
void shmem_collect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                     int PE_size, long *pSync);
void shmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                      int PE_size, long *pSync);
void shmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                      int PE_size, long *pSync);
void shmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                      int PE_size, long *pSync);
void shmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,
                      int PE_size, long *pSync);

int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
#define HPCNET_DECL_TEAM_COLL(N, T) \
    int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root); \
    int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems); \
    int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems); \
    int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems);
HPCNET_RMA_TYPES(HPCNET_DECL_TEAM_COLL)

#define HPCNET_DECL_REDUCE(N, T, OP) \
    void shmem_##N##_##OP##_to_all(T *dest, const T *source, int nreduce, int PE_start, int logPE_stride, \
                                   int PE_size, T *pWrk, long *pSync); \
    int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce);
#define HPCNET_DECL_BITWISE(N, T) HPCNET_DECL_REDUCE(N, T, and) HPCNET_DECL_REDUCE(N, T, or) \
    HPCNET_DECL_REDUCE(N, T, xor)
#define HPCNET_DECL_ARITH(N, T) HPCNET_DECL_REDUCE(N, T, sum) HPCNET_DECL_REDUCE(N, T, prod) \
    HPCNET_DECL_REDUCE(N, T, min) HPCNET_DECL_REDUCE(N, T, max)
HPCNET_BITWISE_REDUCE_TYPES(HPCNET_DECL_BITWISE)
HPCNET_ARITH_REDUCE_TYPES(HPCNET_DECL_ARITH)

/* ---- C11 generic selection ------------------------------------------------------------- */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
#define HPCNET_GENERIC_BASIC(x, F) \
    _Generic((x), float: shmem_float_##F, double: shmem_double_##F, long double: shmem_longdouble_##F, \
             char: shmem_char_##F, signed char: shmem_schar_##F, short: shmem_short_##F, int: shmem_int_##F, \
             long: shmem_long_##F, long long: shmem_longlong_##F, unsigned char: shmem_uchar_##F, \
             unsigned short: shmem_ushort_##F, unsigned int: shmem_uint_##F, unsigned long: shmem_ulong_##F, \
             unsigned long long: shmem_ulonglong_##F)
#define HPCNET_GENERIC_AMO(x, F) \
    _Generic((x), int: shmem_int_##F, long: shmem_long_##F, long long: shmem_longlong_##F, \
             unsigned int: shmem_uint_##F, unsigned long: shmem_ulong_##F, \
             unsigned long long: shmem_ulonglong_##F)
#define HPCNET_GENERIC_EXT(x, F) \
    _Generic((x), float: shmem_float_##F, double: shmem_double_##F, int: shmem_int_##F, long: shmem_long_##F, \
             long long: shmem_longlong_##F, unsigned int: shmem_uint_##F, unsigned long: shmem_ulong_##F, \
             unsigned long long: shmem_ulonglong_##F)
#define HPCNET_GENERIC_SYNC(x, F) \
    _Generic((x), short: shmem_short_##F, int: shmem_int_##F, long: shmem_long_##F, \
             long long: shmem_longlong_##F, unsigned short: shmem_ushort_##F, unsigned int: shmem_uint_##F, \
             unsigned long: shmem_ulong_##F, unsigned long long: shmem_ulonglong_##F)

#define shmem_put(dest, source, nelems, pe) HPCNET_GENERIC_BASIC(*(dest), put)(dest, source, nelems, pe)
#define shmem_get(dest, source, nelems, pe) HPCNET_GENERIC_BASIC(*(dest), get)(dest, source, nelems, pe)
#define shmem_put_nbi(dest, source, nelems, pe) HPCNET_GENERIC_BASIC(*(dest), put_nbi)(dest, source, nelems, pe)
#define shmem_get_nbi(dest, source, nelems, pe) HPCNET_GENERIC_BASIC(*(dest), get_nbi)(dest, source, nelems, pe)
#define shmem_p(dest, value, pe) HPCNET_GENERIC_BASIC(*(dest), p)(dest, value, pe)
#define shmem_g(source, pe) HPCNET_GENERIC_BASIC(*(source), g)(source, pe)
#define shmem_iput(dest, source, dst, sst, nelems, pe) \
    HPCNET_GENERIC_BASIC(*(dest), iput)(dest, source, dst, sst, nelems, pe)
#define shmem_iget(dest, source, dst, sst, nelems, pe) \
    HPCNET_GENERIC_BASIC(*(dest), iget)(dest, source, dst, sst, nelems, pe)
#define shmem_put_signal(dest, source, nelems, sig_addr, signal, sig_op, pe) \
    HPCNET_GENERIC_BASIC(*(dest), put_signal)(dest, source, nelems, sig_addr, signal, sig_op, pe)
#define shmem_atomic_fetch(source, pe) HPCNET_GENERIC_EXT(*(source), atomic_fetch)(source, pe)
#define shmem_atomic_set(dest, value, pe) HPCNET_GENERIC_EXT(*(dest), atomic_set)(dest, value, pe)
#define shmem_atomic_swap(dest, value, pe) HPCNET_GENERIC_EXT(*(dest), atomic_swap)(dest, value, pe)
#define shmem_atomic_compare_swap(dest, cond, value, pe) \
    HPCNET_GENERIC_AMO(*(dest), atomic_compare_swap)(dest, cond, value, pe)
#define shmem_atomic_add(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_add)(dest, value, pe)
#define shmem_atomic_inc(dest, pe) HPCNET_GENERIC_AMO(*(dest), atomic_inc)(dest, pe)
#define shmem_atomic_fetch_add(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_fetch_add)(dest, value, pe)
#define shmem_atomic_fetch_inc(dest, pe) HPCNET_GENERIC_AMO(*(dest), atomic_fetch_inc)(dest, pe)
#define shmem_atomic_and(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_and)(dest, value, pe)
#define shmem_atomic_or(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_or)(dest, value, pe)
#define shmem_atomic_xor(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_xor)(dest, value, pe)
#define shmem_atomic_fetch_and(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_fetch_and)(dest, value, pe)
#define shmem_atomic_fetch_or(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_fetch_or)(dest, value, pe)
#define shmem_atomic_fetch_xor(dest, value, pe) HPCNET_GENERIC_AMO(*(dest), atomic_fetch_xor)(dest, value, pe)
#define shmem_wait_until(ivar, cmp, value) HPCNET_GENERIC_SYNC(*(ivar), wait_until)(ivar, cmp, value)
#define shmem_test(ivar, cmp, value) HPCNET_GENERIC_SYNC(*(ivar), test)(ivar, cmp, value)
#endif

#ifdef __cplusplus
}
#endif
#endif
