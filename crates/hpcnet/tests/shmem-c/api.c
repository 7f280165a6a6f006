/* Every family of the OpenSHMEM C interface with real data, on 4 or more PEs. Each PE prints
 * "FAIL ..." for a wrong result; PE 0 ends with "api: N checks, F failed". */
#include <shmem.h>
#include <stdio.h>
#include <string.h>

static long fails, checks;
#define CHECK(cond, ...) \
    do { \
        checks++; \
        if (!(cond)) { \
            fails++; \
            printf("FAIL line %d: ", __LINE__); \
            printf(__VA_ARGS__); \
            printf("\n"); \
        } \
    } while (0)

/* Symmetric static data. */
static uint8_t b8[16];
static uint16_t b16[16];
static uint32_t b32[16];
static uint64_t b64[16];
static uint64_t b128[32];
static int ivals[8];
static double dval;
static short sval;
static char cvals[64];
static int ai;
static long al;
static long long all_;
static unsigned int aui;
static unsigned long aul;
static unsigned long long aull;
static int32_t ai32;
static int64_t ai64;
static uint32_t au32;
static uint64_t au64;
static size_t asz;
static ptrdiff_t apd;
static float af;
static double ad;
static int flags[8];
static long lflag;
static uint64_t sig;
static char sbuf[64];
static long lock;
static long counter;
static int src32[16], dst32[64];
static long src64[16], dst64[64];
static long pSync[SHMEM_BCAST_SYNC_SIZE];
static long pSync2[SHMEM_REDUCE_SYNC_SIZE];
static int iw[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long lw[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long long llw[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static float fw[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static double dw[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static int ired[4], ires[4];
static long lred[4], lres[4];
static long long llred[2], llres[2];
static float fred[2], fres[2];
static double dred[2], dres[2];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;

    /* ---- setup and query */
    int major, minor;
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_version(&major, &minor);
    shmem_info_get_name(name);
    CHECK(major == 1 && minor == 5 && strlen(name) > 0, "info %d.%d '%s'", major, minor, name);
    CHECK(_my_pe() == me && _num_pes() == n, "deprecated queries");
    CHECK(shmem_pe_accessible(n - 1) && !shmem_pe_accessible(n), "pe_accessible");
    int local = 0;
    CHECK(shmem_addr_accessible(&al, right) && !shmem_addr_accessible(&local, right), "addr_accessible");
    CHECK(shmem_ptr(&al, me) == &al && shmem_ptr(&al, right) == NULL, "shmem_ptr");

    /* ---- sized and typed RMA, blocking and nbi */
    uint8_t s8[4] = {1, 2, 3, (uint8_t)me};
    uint16_t s16[4] = {10, 20, 30, (uint16_t)me};
    uint32_t s32[4] = {100, 200, 300, (uint32_t)me};
    uint64_t s64[4] = {1000, 2000, 3000, (uint64_t)me};
    uint64_t s128[4] = {7, 8, 9, (uint64_t)me};
    shmem_put8(b8, s8, 4, right);
    shmem_put16(b16, s16, 4, right);
    shmem_put32(b32, s32, 4, right);
    shmem_put64(b64, s64, 4, right);
    shmem_put128(b128, s128, 2, right);
    shmem_barrier_all();
    CHECK(b8[3] == left && b16[3] == left && b32[3] == (uint32_t)left && b64[3] == (uint64_t)left, "sized put");
    CHECK(b128[3] == (uint64_t)left && b128[0] == 7, "put128");
    uint64_t g64[4];
    uint32_t g32[4];
    shmem_get64(g64, b64, 4, right);
    shmem_get32(g32, b32, 4, right);
    CHECK(g64[3] == (uint64_t)me && g32[2] == 300, "sized get");
    uint8_t g8[4];
    uint16_t g16[4];
    uint64_t g128[4];
    shmem_get8(g8, b8, 4, right);
    shmem_get16(g16, b16, 4, right);
    shmem_get128(g128, b128, 2, right);
    CHECK(g8[3] == me && g16[3] == me && g128[3] == (uint64_t)me, "get8/16/128");
    shmem_barrier_all();
    int iv[8] = {me, me + 1, me + 2, me + 3, me + 4, me + 5, me + 6, me + 7};
    shmem_int_put_nbi(ivals, iv, 8, right);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(ivals[7] == left + 7, "int put_nbi %d", ivals[7]);
    int got[8];
    shmem_int_get_nbi(got, ivals, 8, left);
    shmem_quiet();
    CHECK(got[0] == (left + n - 1) % n, "int get_nbi into private memory");
    shmem_barrier_all();
    /* nbi get landing in symmetric memory */
    static int ivals2[8];
    shmem_int_get_nbi(ivals2, ivals, 8, right);
    shmem_quiet();
    CHECK(ivals2[0] == me, "int get_nbi into symmetric memory: %d", ivals2[0]);
    shmem_barrier_all();
    shmem_double_p(&dval, 2.5 * me, right);
    shmem_short_p(&sval, (short)-me, right);
    shmem_barrier_all();
    CHECK(dval == 2.5 * left && sval == -left, "p: %f %d", dval, sval);
    CHECK(shmem_double_g(&dval, right) == 2.5 * me && shmem_short_g(&sval, right) == -me, "g");
    /* strided */
    long sl[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    static long strided[16];
    shmem_long_iput(strided, sl, 2, 3, 3, right); /* sl[0], sl[3], sl[6] -> strided[0], [2], [4] */
    shmem_barrier_all();
    CHECK(strided[0] == 0 && strided[2] == 3 && strided[4] == 6 && strided[1] == 0, "iput");
    long back[8] = {0};
    shmem_long_iget(back, strided, 3, 2, 3, right); /* strided[0],[2],[4] -> back[0],[3],[6] */
    CHECK(back[0] == 0 && back[3] == 3 && back[6] == 6, "iget");
    uint32_t w32[4] = {0};
    shmem_iget32(w32, b32, 1, 2, 2, left);
    CHECK(w32[0] == 100 && w32[1] == 300, "iget32");
    shmem_putmem(cvals, "hello, symmetric world", 23, right);
    shmem_barrier_all();
    CHECK(strcmp(cvals, "hello, symmetric world") == 0, "putmem '%s'", cvals);
    /* zero-copy nbi put from symmetric memory */
    shmem_putmem_nbi(sbuf, cvals, 23, left);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(strcmp(sbuf, "hello, symmetric world") == 0, "putmem_nbi from symmetric data");

    /* ---- every standard RMA type: put, p, iput, get, g, iget, put_nbi, get_nbi */
#define TYPE_RMA(N, T) \
    do { \
        static T tsrc[4], tdst[8], tnbi[2]; \
        for (int i = 0; i < 4; i++) tsrc[i] = (T)(me * 4 + i + 1); \
        memset(tdst, 0, sizeof tdst); \
        shmem_barrier_all(); \
        shmem_##N##_put(tdst, tsrc, 2, right); \
        shmem_##N##_p(&tdst[2], (T)(me + 1), right); \
        shmem_##N##_iput(&tdst[4], tsrc, 2, 1, 2, right); \
        shmem_##N##_put_nbi(tnbi, &tsrc[2], 2, right); \
        shmem_quiet(); \
        shmem_barrier_all(); \
        CHECK(tdst[0] == (T)(left * 4 + 1) && tdst[1] == (T)(left * 4 + 2) && tdst[2] == (T)(left + 1) && \
                  tdst[4] == (T)(left * 4 + 1) && tdst[5] == 0 && tdst[6] == (T)(left * 4 + 2) && \
                  tnbi[1] == (T)(left * 4 + 4), \
              #N " put/p/iput/put_nbi"); \
        T g[4] = {0}; \
        shmem_##N##_get(g, tsrc, 2, right); \
        T one = shmem_##N##_g(&tsrc[3], right); \
        CHECK(g[0] == (T)(right * 4 + 1) && g[1] == (T)(right * 4 + 2) && one == (T)(right * 4 + 4), \
              #N " get/g"); \
        shmem_##N##_iget(g, tsrc, 2, 2, 2, right); \
        CHECK(g[0] == (T)(right * 4 + 1) && g[2] == (T)(right * 4 + 3), #N " iget"); \
        shmem_##N##_get_nbi(g, &tsrc[1], 1, left); \
        shmem_quiet(); \
        CHECK(g[0] == (T)(left * 4 + 2), #N " get_nbi"); \
        shmem_barrier_all(); \
    } while (0);
    HPCNET_RMA_TYPES(TYPE_RMA)
    {
        static uint8_t s8i[8], d8i[8];
        static uint16_t s16i[8], d16i[8];
        static uint64_t s64i[8], d64i[8], s128i[8], d128i[8];
        for (int i = 0; i < 8; i++) {
            s8i[i] = (uint8_t)(me + i);
            s16i[i] = (uint16_t)(me + i);
            s64i[i] = (uint64_t)(me + i);
            s128i[i] = (uint64_t)(me * 10 + i);
        }
        shmem_barrier_all();
        shmem_iput8(d8i, s8i, 2, 3, 2, right);
        shmem_iput16(d16i, s16i, 2, 3, 2, right);
        shmem_iput64(d64i, s64i, 2, 3, 2, right);
        shmem_iput128(d128i, s128i, 2, 1, 2, right); /* 16-byte elements: pairs of words */
        shmem_barrier_all();
        CHECK(d8i[2] == left + 3 && d16i[2] == left + 3 && d64i[2] == (uint64_t)left + 3, "iput8/16/64");
        CHECK(d128i[4] == (uint64_t)left * 10 + 2 && d128i[5] == (uint64_t)left * 10 + 3, "iput128");
        uint8_t g8i[4];
        uint16_t g16i[4];
        uint64_t g64i[4], g128i[4];
        shmem_iget8(g8i, s8i, 1, 3, 2, right);
        shmem_iget16(g16i, s16i, 1, 3, 2, right);
        shmem_iget64(g64i, s64i, 1, 3, 2, right);
        shmem_iget128(g128i, s128i, 1, 2, 2, right);
        CHECK(g8i[1] == right + 3 && g16i[1] == right + 3 && g64i[1] == (uint64_t)right + 3, "iget8/16/64");
        CHECK(g128i[2] == (uint64_t)right * 10 + 4, "iget128");
        shmem_barrier_all();
    }
    /* deprecated typed waits */
    lflag = 0;
    shmem_barrier_all();
    shmem_long_p(&lflag, 3, right);
    shmem_long_wait(&lflag, 0);
    shmem_wait_until(&lflag, SHMEM_CMP_EQ, 3L);
    CHECK(lflag == 3, "shmem_long_wait");
    shmem_barrier_all();

    /* ---- C11 generic selection */
    long gl = 40 + me;
    shmem_put(&al, &gl, 1, right);
    shmem_barrier_all();
    CHECK(al == 40 + left && shmem_g(&al, right) == 40 + me, "generic put/g");
    shmem_p(&dval, 1.5, right);
    shmem_barrier_all();
    CHECK(dval == 1.5, "generic p");
    al = 0;
    shmem_barrier_all();

    /* ---- atomics on every standard type */
#define AMO_CHECK(N, T, var) \
    do { \
        var = 0; \
        shmem_barrier_all(); \
        shmem_##N##_atomic_add(&var, (T)2, 0); \
        shmem_##N##_atomic_inc(&var, 0); \
        T f = shmem_##N##_atomic_fetch_add(&var, (T)1, 0); \
        (void)shmem_##N##_atomic_fetch_inc(&var, 0); \
        shmem_barrier_all(); \
        T total = shmem_##N##_atomic_fetch(&var, 0); \
        CHECK(total == (T)(5 * n) && f < (T)(5 * n), #N " add/inc/fetch_add/fetch_inc: %lld", (long long)total); \
        shmem_barrier_all(); \
        if (me == 0) { \
            shmem_##N##_atomic_set(&var, (T)12, n - 1); \
            T o = shmem_##N##_atomic_swap(&var, (T)6, n - 1); \
            T c1 = shmem_##N##_atomic_compare_swap(&var, (T)5, (T)9, n - 1); \
            T c2 = shmem_##N##_atomic_compare_swap(&var, (T)6, (T)3, n - 1); \
            shmem_##N##_atomic_and(&var, (T)1, n - 1); \
            shmem_##N##_atomic_or(&var, (T)12, n - 1); \
            shmem_##N##_atomic_xor(&var, (T)4, n - 1); \
            T x = shmem_##N##_atomic_fetch_xor(&var, (T)1, n - 1); \
            T a = shmem_##N##_atomic_fetch_and(&var, (T)8, n - 1); \
            T r = shmem_##N##_atomic_fetch_or(&var, (T)2, n - 1); \
            T last = shmem_##N##_atomic_fetch(&var, n - 1); \
            CHECK(o == 12 && c1 == 6 && c2 == 6 && x == 9 && a == 8 && r == 8 && last == 10, \
                  #N " set/swap/cswap/and/or/xor: %lld %lld %lld %lld %lld %lld %lld", (long long)o, \
                  (long long)c1, (long long)c2, (long long)x, (long long)a, (long long)r, (long long)last); \
            T fetched; \
            shmem_##N##_atomic_fetch_add_nbi(&fetched, &var, (T)1, n - 1); \
            shmem_quiet(); \
            CHECK(fetched == 10, #N " fetch_add_nbi"); \
        } \
        shmem_barrier_all(); \
    } while (0)
    AMO_CHECK(int, int, ai);
    AMO_CHECK(long, long, al);
    AMO_CHECK(longlong, long long, all_);
    AMO_CHECK(uint, unsigned int, aui);
    AMO_CHECK(ulong, unsigned long, aul);
    AMO_CHECK(ulonglong, unsigned long long, aull);
    AMO_CHECK(int32, int32_t, ai32);
    AMO_CHECK(int64, int64_t, ai64);
    AMO_CHECK(uint32, uint32_t, au32);
    AMO_CHECK(uint64, uint64_t, au64);
    AMO_CHECK(size, size_t, asz);
    AMO_CHECK(ptrdiff, ptrdiff_t, apd);
    if (me == 0) {
        shmem_float_atomic_set(&af, 1.25f, 1);
        float fo = shmem_float_atomic_swap(&af, -3.5f, 1);
        double dd = shmem_double_atomic_swap(&ad, 6.75, 1);
        CHECK(fo == 1.25f && shmem_float_atomic_fetch(&af, 1) == -3.5f && dd == 0.0 &&
                  shmem_double_atomic_fetch(&ad, 1) == 6.75,
              "float/double set/swap/fetch");
    }
    shmem_barrier_all();
    /* deprecated names */
    ai = 0;
    al = 0;
    shmem_barrier_all();
    int o1 = shmem_int_fadd(&ai, 2, 0);
    shmem_int_finc(&ai, 0);
    shmem_int_add(&ai, 1, 0);
    shmem_int_inc(&ai, 0);
    shmem_long_set(&al, 7, right);
    shmem_barrier_all();
    CHECK(shmem_int_fetch(&ai, 0) == 5 * n && o1 >= 0 && o1 < 5 * n && al == 7, "deprecated AMOs");
    CHECK(shmem_long_cswap(&al, 7, 8, me) == 7 && shmem_swap(&al, 1, me) == 8 && al == 1, "cswap/swap");
    double before = ad;
    CHECK(shmem_long_fetch(&al, me) == 1 && shmem_double_swap(&ad, 1.0, me) == before && ad == 1.0,
          "fetch/double swap");
    shmem_barrier_all();
    /* generic AMOs */
    al = 0;
    shmem_barrier_all();
    shmem_atomic_add(&al, 1L, 0);
    shmem_barrier_all();
    CHECK(shmem_atomic_fetch(&al, 0) == n, "generic atomics");
    shmem_barrier_all();

    /* ---- point synchronisation */
    for (int i = 0; i < 8; i++) flags[i] = 0;
    lflag = 0;
    shmem_barrier_all();
    shmem_int_p(&flags[me % 8], 1, right); /* lands in right's flags[me] */
    shmem_long_atomic_add(&lflag, 1, 0);
    if (me == 0) {
        shmem_long_wait_until(&lflag, SHMEM_CMP_EQ, n);
        shmem_long_wait(&lflag, 0); /* wait while equal to 0: returns */
    }
    size_t any = shmem_int_wait_until_any(flags, 8, NULL, SHMEM_CMP_EQ, 1);
    CHECK(any == (size_t)(left % 8), "wait_until_any %zu", any);
    int status[8] = {0};
    status[left % 8] = 1; /* exclude it: nothing else is set */
    CHECK(!shmem_int_test_any(flags, 8, status, SHMEM_CMP_EQ, 1) == 0 ||
              shmem_int_test_any(flags, 8, status, SHMEM_CMP_EQ, 1) == SIZE_MAX,
          "test_any with exclusions");
    size_t idx[8];
    size_t some = shmem_int_wait_until_some(flags, 8, idx, NULL, SHMEM_CMP_EQ, 1);
    CHECK(some == 1 && idx[0] == (size_t)(left % 8), "wait_until_some");
    CHECK(shmem_int_test(&flags[left % 8], SHMEM_CMP_EQ, 1) && !shmem_int_test(&flags[(left + 1) % 8], SHMEM_CMP_GT, 0),
          "test");
    status[left % 8] = 0;
    for (int i = 0; i < 8; i++) status[i] = i != left % 8;
    shmem_int_wait_until_all(flags, 8, status, SHMEM_CMP_EQ, 1);
    CHECK(shmem_int_test_all(flags, 8, status, SHMEM_CMP_EQ, 1) && shmem_int_test_some(flags, 8, idx, status, SHMEM_CMP_EQ, 1) == 1,
          "wait_until_all/test_all/test_some");
    shmem_barrier_all();

    /* ---- put with signal */
    sig = 0;
    shmem_barrier_all();
    shmem_putmem_signal(sbuf, "signalled", 10, &sig, 5, SHMEM_SIGNAL_SET, right);
    uint64_t sv = shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 5);
    CHECK(sv == 5 && strcmp(sbuf, "signalled") == 0, "put_signal");
    shmem_barrier_all();
    shmem_long_put_signal(&al, &gl, 1, &sig, 2, SHMEM_SIGNAL_ADD, right);
    shmem_signal_wait_until(&sig, SHMEM_CMP_GE, 7);
    CHECK(shmem_signal_fetch(&sig) == 7 && al == gl - me + left, "put_signal add");
    shmem_barrier_all();

    /* ---- locks: a read-modify-write by get and put under the lock */
    counter = 0;
    shmem_barrier_all();
    for (int i = 0; i < 3; i++) {
        shmem_set_lock(&lock);
        long c = shmem_long_g(&counter, 0);
        shmem_long_p(&counter, c + 1, 0);
        shmem_quiet();
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    CHECK(shmem_long_g(&counter, 0) == 3 * n, "locks: counter %ld", shmem_long_g(&counter, 0));
    if (me == 0) {
        CHECK(shmem_test_lock(&lock) == 0, "test_lock takes a free lock");
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();

    /* ---- collectives on active sets */
    for (int i = 0; i < 16; i++) {
        src32[i] = 100 * me + i;
        src64[i] = 1000L * me + i;
    }
    for (int i = 0; i < 64; i++) {
        dst32[i] = -1;
        dst64[i] = -1;
    }
    shmem_barrier_all();
    shmem_broadcast32(dst32, src32, 4, 1, 0, 0, n, pSync);
    CHECK(me == 1 ? dst32[0] == -1 : dst32[3] == 103, "broadcast32 (root's dest untouched)");
    shmem_barrier_all();
    shmem_broadcast64(dst64, src64, 2, 0, 0, 0, n, pSync);
    CHECK(me == 0 ? dst64[0] == -1 : dst64[1] == 1, "broadcast64");
    shmem_barrier_all();
    shmem_fcollect32(dst32, src32, 2, 0, 0, n, pSync);
    CHECK(dst32[2 * (n - 1) + 1] == 100 * (n - 1) + 1, "fcollect32");
    shmem_barrier_all();
    shmem_collect64(dst64, src64, (size_t)me + 1, 0, 0, n, pSync); /* PE i gives i+1 elements */
    CHECK(dst64[0] == 0 && dst64[1] == 1000 && dst64[2] == 1001 && dst64[3] == 2000, "collect64");
    shmem_barrier_all();
    shmem_alltoall32(dst32, src32, 1, 0, 0, n, pSync); /* block j of PE i goes to PE j */
    CHECK(dst32[left] == 100 * left + me, "alltoall32 %d", dst32[left]);
    shmem_barrier_all();
    shmem_fcollect64(dst64, src64, 1, 0, 0, n, pSync);
    shmem_alltoall64(dst64 + n, src64, 1, 0, 0, n, pSync);
    CHECK(dst64[right] == 1000L * right && dst64[n + right] == 1000L * right + me, "fcollect64/alltoall64");
    shmem_barrier_all();
    /* reductions */
    for (int i = 0; i < 4; i++) {
        ired[i] = me + i;
        lred[i] = (long)me * (i + 1);
    }
    llred[0] = 1LL << me;
    fred[0] = 2.0f;
    dred[0] = 0.5 * me;
    shmem_barrier_all();
    shmem_int_sum_to_all(ires, ired, 4, 0, 0, n, iw, pSync2);
    CHECK(ires[3] == n * (n - 1) / 2 + 3 * n, "int sum %d", ires[3]);
    shmem_barrier_all();
    shmem_long_max_to_all(lres, lred, 4, 0, 0, n, lw, pSync2);
    CHECK(lres[3] == 4L * (n - 1), "long max");
    shmem_barrier_all();
    shmem_long_min_to_all(lres, lred, 4, 0, 0, n, lw, pSync2);
    CHECK(lres[3] == 0, "long min");
    shmem_barrier_all();
    shmem_longlong_xor_to_all(llres, llred, 1, 0, 0, n, llw, pSync2);
    CHECK(llres[0] == (1LL << n) - 1, "longlong xor");
    shmem_barrier_all();
    shmem_longlong_or_to_all(llres, llred, 1, 0, 0, n, llw, pSync2);
    shmem_barrier_all();
    shmem_int_and_to_all(ires, ired, 1, 0, 0, n, iw, pSync2);
    CHECK(llres[0] == (1LL << n) - 1 && ires[0] == 0, "or / and");
    shmem_barrier_all();
    shmem_float_prod_to_all(fres, fred, 1, 0, 0, n, fw, pSync2);
    CHECK(fres[0] == (float)(1 << n), "float prod %f", fres[0]);
    shmem_barrier_all();
    shmem_double_sum_to_all(dres, dred, 1, 0, 0, n, dw, pSync2);
    CHECK(dres[0] == 0.25 * n * (n - 1), "double sum");
    shmem_barrier_all();

    /* ---- teams */
    shmem_team_t even;
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, (n + 1) / 2, NULL, 0, &even);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == n && shmem_team_my_pe(SHMEM_TEAM_WORLD) == me, "world team");
    if (me % 2 == 0) {
        CHECK(even != SHMEM_TEAM_INVALID && shmem_team_my_pe(even) == me / 2 &&
                  shmem_team_n_pes(even) == (n + 1) / 2,
              "split_strided");
        CHECK(shmem_team_translate_pe(even, 1, SHMEM_TEAM_WORLD) == 2, "translate_pe");
        lred[0] = me;
        shmem_team_sync(even);
        shmem_long_sum_reduce(even, lres, lred, 1);
        long want = 0;
        for (int p = 0; p < n; p += 2) want += p;
        CHECK(lres[0] == want, "team sum_reduce %ld", lres[0]);
        snprintf(cvals, sizeof cvals, "from team root %d", me);
        shmem_char_broadcast(even, sbuf, cvals, 20, 0);
        CHECK(strcmp(sbuf, "from team root 0") == 0, "team char broadcast '%s'", sbuf);
        shmem_int_fcollect(even, dst32, src32, 1);
        CHECK(dst32[1] == 200, "team fcollect");
        shmem_barrier(0, 1, (n + 1) / 2, pSync);
        shmem_team_destroy(even);
    } else {
        CHECK(even == SHMEM_TEAM_INVALID, "split_strided: not a member");
    }
    shmem_sync_all();
    shmem_barrier_all();

    /* ---- symmetric heap */
    long *h = shmem_malloc(16 * sizeof(long));
    int *z = shmem_calloc(32, sizeof(int));
    void *al64 = shmem_align(4096, 100);
    CHECK(h && z && ((uintptr_t)al64 % 4096) == 0, "malloc/calloc/align");
    int zeros = 1;
    for (int i = 0; i < 32; i++) zeros &= z[i] == 0;
    CHECK(zeros, "calloc zeroes");
    for (int i = 0; i < 16; i++) h[i] = me * 100 + i;
    shmem_barrier_all();
    long hv = shmem_long_g(&h[15], right);
    CHECK(hv == right * 100 + 15, "heap object at the same offset on every PE");
    h = shmem_realloc(h, 64 * sizeof(long));
    CHECK(h[15] == me * 100 + 15, "realloc keeps the contents");
    h[63] = me;
    shmem_barrier_all();
    CHECK(shmem_long_g(&h[63], left) == left, "realloc'd object is symmetric");
    shmem_free(z);
    shmem_free(al64);
    shmem_free(h);
    long *old = shmalloc(8);
    shfree(old);
    CHECK(shmem_malloc((size_t)1 << 40) == NULL, "a heap without room gives NULL");
    CHECK(shmem_team_n_pes(SHMEM_TEAM_SHARED) == 1 && shmem_team_my_pe(SHMEM_TEAM_SHARED) == 0, "team shared");

    /* ---- result */
    static long all_fails, mine;
    mine = fails;
    shmem_barrier_all();
    shmem_long_sum_to_all(&all_fails, &mine, 1, 0, 0, n, lw, pSync2);
    if (me == 0) printf("api: %ld checks per PE, %ld failed\n", checks, all_fails);
    shmem_finalize();
    return all_fails == 0 ? 0 : 1;
}
