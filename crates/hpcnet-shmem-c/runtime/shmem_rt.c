/*
 * The PE side of hpcnet's OpenSHMEM C interface, linked into every program built with
 * `hpcnet shmem-cc`. It owns: moving the program's writable static data and its symmetric heap
 * onto one shared memory file that the simulator maps (so what the simulated NIC writes is this
 * process's memory), translating C pointers to symmetric offsets, and turning each call into
 * one request to the simulator over the socket of `hpcnet shmem-run` (blocking for the reply).
 * It keeps no SHMEM state of its own beyond the job's shape and the teams: every call is
 * carried out by the simulator's library. The wire format is mirrored in src/proto.rs.
 */
#define _GNU_SOURCE
#include "shmem.h"

/* SYNC_CODE asks whether a type is signed by comparing (T)-1 with 0. */
#pragma GCC diagnostic ignored "-Wtype-limits"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- wire format (src/proto.rs) ---------------------------------------------------------- */

enum {
    OP_INIT = 1, OP_FINALIZE = 2, OP_ABORT = 3, OP_GLOBAL_EXIT = 4,
    OP_MALLOC = 10, OP_CALLOC = 11, OP_ALIGN = 12, OP_FREE = 13, OP_REALLOC = 14,
    OP_PUT = 20, OP_PUT_SYM_NBI = 21, OP_GET = 22, OP_GET_SYM_NBI = 23, OP_IPUT = 24, OP_IGET = 25,
    OP_PUT_SIGNAL = 26,
    OP_AMO = 30,
    OP_FENCE = 40, OP_QUIET = 41, OP_BARRIER_ALL = 42, OP_BARRIER = 43, OP_SYNC_ALL = 44, OP_SYNC = 45,
    OP_WAIT = 50, OP_WAIT_VEC = 51, OP_SIGNAL_WAIT = 52,
    OP_LOCK_SET = 60, OP_LOCK_CLEAR = 61, OP_LOCK_TEST = 62,
    OP_BCAST = 70, OP_COLLECT = 71, OP_FCOLLECT = 72, OP_ALLTOALL = 73, OP_REDUCE = 74,
    OP_TIME = 80,
};
enum { AMO_FETCH, AMO_SET, AMO_SWAP, AMO_CSWAP, AMO_ADD, AMO_FADD, AMO_AND, AMO_FAND, AMO_OR, AMO_FOR,
       AMO_XOR, AMO_FXOR };
enum { RED_SUM, RED_PROD, RED_MIN, RED_MAX, RED_AND, RED_OR, RED_XOR };
enum { DT_I32, DT_I64, DT_F32, DT_F64 };

struct req {
    uint32_t op, aux;
    uint64_t cpu_ns; /* host CPU time spent by the program since the last reply */
    uint64_t a[7];
    uint64_t len; /* payload bytes that follow */
};
struct rep {
    int64_t status; /* 0 ok; 1 an invalid call (payload: the reason); 2 the job is ending */
    uint64_t v[2];
    uint64_t len;
};

/* ---- state ------------------------------------------------------------------------------- */

static int hs_fd = -1;
static int hs_me = -1, hs_npes;
static int hs_finalized;
static char *hs_data_lo, *hs_data_hi, *hs_heap;
static uint64_t hs_data_len, hs_heap_len;
static uint64_t hs_cpu_mark;
static int hs_measure_cpu; /* the job's compute model uses the host CPU time */
struct hpcnet_team {
    int start, stride, size;
};
struct hpcnet_team hpcnet_team_world, hpcnet_team_shared;

/* The host clocks, by system call: clock_gettime itself is the simulated clock (below). */
static int host_clock(clockid_t id, struct timespec *t) {
    return (int)syscall(SYS_clock_gettime, id, t);
}

static uint64_t cpu_now(void) {
    struct timespec t;
    if (!hs_measure_cpu) return 0;
    host_clock(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Stop this PE at an invalid call: the simulator reports it (naming the PE and the call) and
 * ends the job with exit code 2. Outside a job the message goes to stderr here. */
static void die(const char *fn, const char *msg) {
    fflush(stdout);
    if (hs_fd >= 0) {
        char both[1200];
        snprintf(both, sizeof both, "%s: %s", fn, msg);
        struct req r = {0};
        r.op = OP_ABORT;
        r.len = strlen(both);
        struct iovec iov[2] = {{&r, sizeof r}, {both, r.len}};
        struct msghdr m = {0};
        m.msg_iov = iov;
        m.msg_iovlen = 2;
        if (sendmsg(hs_fd, &m, MSG_NOSIGNAL) > 0) {
            struct rep p;
            ssize_t got = read(hs_fd, &p, sizeof p);
            (void)got;
            _exit(2);
        }
    }
    fprintf(stderr, "hpcnet shmem: PE %d: %s: %s\n", hs_me, fn, msg);
    _exit(2);
}

static void io_full(int writing, void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = writing ? send(hs_fd, p, len, MSG_NOSIGNAL) : read(hs_fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            /* The simulator ended the job (another PE failed) or went away. */
            fflush(stdout);
            _exit(3);
        }
        p += n;
        len -= (size_t)n;
    }
}

/* One call: send the request and its payload, wait for the reply; the reply's payload goes to
 * `out` (at most `cap` bytes). Returns the reply; an invalid call ends the PE with the reason. */
static struct rep call(const char *fn, struct req *r, const void *payload, size_t plen, void *out, size_t cap) {
    if (hs_fd < 0) die(fn, "called before shmem_init (or start_pes)");
    if (hs_finalized) die(fn, "called after shmem_finalize");
    /* What the program printed so far is kept even if the job ends while this PE waits. */
    fflush(stdout);
    r->cpu_ns = cpu_now() - hs_cpu_mark;
    r->len = plen;
    struct iovec iov[2] = {{r, sizeof *r}, {(void *)payload, plen}};
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = plen ? 2 : 1;
    size_t total = sizeof *r + plen;
    ssize_t n = sendmsg(hs_fd, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR) n = sendmsg(hs_fd, &m, MSG_NOSIGNAL);
    if (n < 0) _exit(3);
    if ((size_t)n < total) {
        /* Finish a partial send. */
        size_t done = (size_t)n;
        if (done < sizeof *r) {
            io_full(1, (char *)r + done, sizeof *r - done);
            done = sizeof *r;
        }
        io_full(1, (char *)payload + (done - sizeof *r), plen - (done - sizeof *r));
    }
    struct rep p;
    io_full(0, &p, sizeof p);
    if (p.status != 0) {
        char msg[1024];
        size_t keep = p.len < sizeof msg - 1 ? p.len : sizeof msg - 1;
        io_full(0, msg, keep);
        msg[keep] = 0;
        for (uint64_t rest = p.len - keep; rest > 0;) {
            char sink[256];
            size_t k = rest < sizeof sink ? rest : sizeof sink;
            io_full(0, sink, k);
            rest -= k;
        }
        if (p.status == 2) {
            fflush(stdout);
            _exit(3);
        }
        die(fn, msg);
    }
    if (p.len > cap) die(fn, "the simulator replied with more data than asked (internal error)");
    if (p.len) io_full(0, out, p.len);
    hs_cpu_mark = cpu_now();
    return p;
}

static struct rep call0(const char *fn, uint32_t op, uint32_t aux, uint64_t a0, uint64_t a1, uint64_t a2,
                        uint64_t a3) {
    struct req r = {0};
    r.op = op;
    r.aux = aux;
    r.a[0] = a0;
    r.a[1] = a1;
    r.a[2] = a2;
    r.a[3] = a3;
    return call(fn, &r, NULL, 0, NULL, 0);
}

/* An invalid call found here. */
static void bad(const char *fn, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die(fn, msg);
}

/* The symmetric offset of [p, p + len): static data first, then the heap. */
static uint64_t sym(const char *fn, const void *p, size_t len) {
    const char *c = p;
    if (hs_fd < 0) die(fn, "called before shmem_init (or start_pes)");
    if (c >= hs_data_lo && c < hs_data_hi) {
        if (len > (size_t)(hs_data_hi - c))
            bad(fn, "%zu bytes at %p run past the end of the program's symmetric static data", len, p);
        return (uint64_t)(c - hs_data_lo);
    }
    if (c >= hs_heap && c < hs_heap + hs_heap_len) {
        if (len > (size_t)(hs_heap + hs_heap_len - c))
            bad(fn, "%zu bytes at %p run past the end of the symmetric heap", len, p);
        return hs_data_len + (uint64_t)(c - hs_heap);
    }
    bad(fn,
        "address %p is not symmetric: it is neither a global or static variable of the program nor memory "
        "of shmem_malloc (a local variable or malloc memory cannot be a remote target)",
        p);
    return 0;
}

static int is_sym(const void *p, size_t len) {
    const char *c = p;
    if (c >= hs_data_lo && c < hs_data_hi) return len <= (size_t)(hs_data_hi - c);
    if (c >= hs_heap && c < hs_heap + hs_heap_len) return len <= (size_t)(hs_heap + hs_heap_len - c);
    return 0;
}

static void check_pe(const char *fn, int pe) {
    if (pe < 0 || pe >= hs_npes) bad(fn, "PE %d does not exist (the job has %d PEs)", pe, hs_npes);
}

/* ---- setup ------------------------------------------------------------------------------- */

struct seg {
    uintptr_t lo, hi, relro;
    int found;
};

static int find_data(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct seg *s = arg;
    /* The first object is the program itself. */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *h = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + h->p_vaddr;
        if (h->p_type == PT_LOAD && (h->p_flags & PF_W)) {
            if (!s->found || lo < s->lo) s->lo = lo;
            if (!s->found || lo + h->p_memsz > s->hi) s->hi = lo + h->p_memsz;
            s->found = 1;
        } else if (h->p_type == PT_GNU_RELRO) {
            s->relro = lo + h->p_memsz;
        }
    }
    return 1;
}

static void at_exit(void) {
    if (hs_fd >= 0 && !hs_finalized) shmem_finalize();
}

void shmem_init(void) {
    if (hs_fd >= 0) return;
    const char *fn = "shmem_init";
    const char *fd_s = getenv("HPCNET_SHMEM_FD");
    const char *heap_s = getenv("HPCNET_SHMEM_HEAP");
    if (!fd_s || !heap_s) {
        fprintf(stderr,
                "hpcnet shmem: this is an OpenSHMEM program built for hpcnet; run it as one simulated job with\n"
                "  hpcnet shmem-run SCENARIO --pes N -- PROGRAM [ARGS]\n");
        exit(2);
    }
    int fd = atoi(fd_s);
    uint64_t heap = strtoull(heap_s, NULL, 10);
    long page = sysconf(_SC_PAGESIZE);
    struct seg s = {0};
    dl_iterate_phdr(find_data, &s);
    if (!s.found) die(fn, "the program has no writable data segment");
    uintptr_t lo = s.lo & ~(uintptr_t)(page - 1);
    uintptr_t hi = (s.hi + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t relro = s.relro & ~(uintptr_t)(page - 1);
    if (relro > lo && relro <= hi) lo = relro;
    size_t dlen = hi - lo;
    /* Move the static data onto a shared memory file, then map the heap behind it. No global
     * may be written between the copy and the remapping: it would be lost. */
    int mfd = memfd_create("hpcnet-shmem", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, (off_t)(dlen + heap)) != 0) die(fn, "cannot create the shared memory file");
    void *tmp = mmap(NULL, dlen, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (tmp == MAP_FAILED) die(fn, "cannot map the shared memory file");
    memcpy(tmp, (void *)lo, dlen);
    void *at = mmap((void *)lo, dlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0);
    if (at != (void *)lo) die(fn, "cannot remap the program's static data");
    munmap(tmp, dlen);
    void *h = mmap(NULL, heap ? heap : 1, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)dlen);
    if (h == MAP_FAILED) die(fn, "cannot map the symmetric heap");
    hs_fd = fd;
    hs_data_lo = (char *)lo;
    hs_data_hi = (char *)hi;
    hs_data_len = dlen;
    hs_heap = h;
    hs_heap_len = heap;
    hs_measure_cpu = getenv("HPCNET_SHMEM_CPU") != NULL;

    /* The request carries the memory file. */
    struct req r = {0};
    r.op = OP_INIT;
    r.a[0] = dlen;
    r.a[1] = heap;
    r.cpu_ns = cpu_now();
    struct iovec iov = {&r, sizeof r};
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof ctl);
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &mfd, sizeof(int));
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != (ssize_t)sizeof r) die(fn, "cannot reach the simulator");
    close(mfd);
    struct rep p;
    io_full(0, &p, sizeof p);
    if (p.status != 0) _exit(3);
    hs_me = (int)p.v[0];
    hs_npes = (int)p.v[1];
    hpcnet_team_world.start = 0;
    hpcnet_team_world.stride = 1;
    hpcnet_team_world.size = hs_npes;
    hpcnet_team_shared.start = hs_me;
    hpcnet_team_shared.stride = 1;
    hpcnet_team_shared.size = 1;
    hs_cpu_mark = cpu_now();
    atexit(at_exit);
}

int shmem_init_thread(int requested, int *provided) {
    (void)requested;
    shmem_init();
    if (provided) *provided = SHMEM_THREAD_SINGLE;
    return 0;
}
void shmem_query_thread(int *provided) {
    if (provided) *provided = SHMEM_THREAD_SINGLE;
}
void start_pes(int npes) {
    (void)npes;
    shmem_init();
}

void shmem_finalize(void) {
    if (hs_fd < 0 || hs_finalized) return;
    call0(__func__, OP_FINALIZE, 0, 0, 0, 0, 0);
    fflush(stdout);
    hs_finalized = 1;
}

void shmem_global_exit(int status) {
    call0(__func__, OP_GLOBAL_EXIT, 0, (uint64_t)(int64_t)status, 0, 0, 0);
    fflush(stdout);
    _exit(status);
}

static void need_init(const char *fn) {
    if (hs_fd < 0) die(fn, "called before shmem_init (or start_pes)");
}
int shmem_my_pe(void) {
    need_init(__func__);
    return hs_me;
}
int shmem_n_pes(void) {
    need_init(__func__);
    return hs_npes;
}
int _my_pe(void) {
    return shmem_my_pe();
}
int _num_pes(void) {
    return shmem_n_pes();
}
int shmem_pe_accessible(int pe) {
    return pe >= 0 && pe < hs_npes;
}
int shmem_addr_accessible(const void *addr, int pe) {
    return shmem_pe_accessible(pe) && is_sym(addr, 1);
}
void *shmem_ptr(const void *dest, int pe) {
    /* Only this PE's own memory is load/store accessible. */
    return pe == hs_me && is_sym(dest, 1) ? (void *)dest : NULL;
}
void shmem_info_get_version(int *major, int *minor) {
    *major = SHMEM_MAJOR_VERSION;
    *minor = SHMEM_MINOR_VERSION;
}
void shmem_info_get_name(char *name) {
    strncpy(name, SHMEM_VENDOR_STRING, SHMEM_MAX_NAME_LEN - 1);
    name[SHMEM_MAX_NAME_LEN - 1] = 0;
}
void shmem_clear_cache_inv(void) {}
void shmem_set_cache_inv(void) {}
void shmem_clear_cache_line_inv(void *dest) {
    (void)dest;
}
void shmem_set_cache_line_inv(void *dest) {
    (void)dest;
}
void shmem_udcflush(void) {}
void shmem_udcflush_line(void *dest) {
    (void)dest;
}

/* ---- symmetric heap ---------------------------------------------------------------------- */

/* The simulator answers UINT64_MAX when the heap has no room (on every PE alike). */
static void *heap_ptr(uint64_t off) {
    return off == UINT64_MAX ? NULL : hs_heap + (off - hs_data_len);
}
void *shmem_malloc(size_t size) {
    if (size == 0) return NULL;
    return heap_ptr(call0(__func__, OP_MALLOC, 0, size, 0, 0, 0).v[0]);
}
void *shmem_malloc_with_hints(size_t size, long hints) {
    (void)hints;
    return shmem_malloc(size);
}
void *shmem_calloc(size_t count, size_t size) {
    if (count == 0 || size == 0) return NULL;
    return heap_ptr(call0(__func__, OP_CALLOC, 0, count, size, 0, 0).v[0]);
}
void *shmem_align(size_t alignment, size_t size) {
    if (size == 0) return NULL;
    return heap_ptr(call0(__func__, OP_ALIGN, 0, alignment, size, 0, 0).v[0]);
}
void shmem_free(void *ptr) {
    if (!ptr) return;
    call0(__func__, OP_FREE, 0, sym(__func__, ptr, 0), 0, 0, 0);
}
void *shmem_realloc(void *ptr, size_t size) {
    if (!ptr) return shmem_malloc(size);
    if (size == 0) {
        shmem_free(ptr);
        return NULL;
    }
    return heap_ptr(call0(__func__, OP_REALLOC, 0, sym(__func__, ptr, 0), size, 0, 0).v[0]);
}
void *shmalloc(size_t size) {
    return shmem_malloc(size);
}
void *shmemalign(size_t alignment, size_t size) {
    return shmem_align(alignment, size);
}
void *shrealloc(void *ptr, size_t size) {
    return shmem_realloc(ptr, size);
}
void shfree(void *ptr) {
    shmem_free(ptr);
}

/* ---- RMA --------------------------------------------------------------------------------- */

static void put_bytes(const char *fn, void *dest, const void *src, size_t len, int pe, int nbi) {
    check_pe(fn, pe);
    if (len == 0) return;
    uint64_t d = sym(fn, dest, len);
    if (nbi && len > 0 && is_sym(src, len)) {
        /* Zero-copy from symmetric memory: the NIC reads it until the next quiet. */
        call0(fn, OP_PUT_SYM_NBI, 0, d, sym(fn, src, len), len, (uint64_t)pe);
        return;
    }
    struct req r = {0};
    r.op = OP_PUT;
    r.a[0] = d;
    r.a[1] = (uint64_t)pe;
    call(fn, &r, src, len, NULL, 0);
}

static void get_bytes(const char *fn, void *dest, const void *src, size_t len, int pe, int nbi) {
    check_pe(fn, pe);
    if (len == 0) return;
    uint64_t s = sym(fn, src, len);
    if (nbi && len > 0 && is_sym(dest, len)) {
        /* Lands straight in this PE's symmetric memory; complete at the next quiet. */
        call0(fn, OP_GET_SYM_NBI, 0, sym(fn, dest, len), s, len, (uint64_t)pe);
        return;
    }
    struct req r = {0};
    r.op = OP_GET;
    r.a[0] = s;
    r.a[1] = len;
    r.a[2] = (uint64_t)pe;
    call(fn, &r, NULL, 0, dest, len);
}

static void iput_bytes(const char *fn, void *dest, const void *src, ptrdiff_t dst, ptrdiff_t sst, size_t n,
                       size_t w, int pe) {
    check_pe(fn, pe);
    if (n == 0) return;
    if (dst <= 0 || sst <= 0) bad(fn, "strides must be positive (dst %td, sst %td)", dst, sst);
    uint64_t d = sym(fn, dest, ((n - 1) * (size_t)dst + 1) * w);
    char *packed = malloc(n * w);
    if (!packed) die(fn, "out of memory");
    for (size_t i = 0; i < n; i++) memcpy(packed + i * w, (const char *)src + i * (size_t)sst * w, w);
    struct req r = {0};
    r.op = OP_IPUT;
    r.aux = (uint32_t)w;
    r.a[0] = d;
    r.a[1] = (uint64_t)dst;
    r.a[2] = n;
    r.a[3] = (uint64_t)pe;
    call(fn, &r, packed, n * w, NULL, 0);
    free(packed);
}

static void iget_bytes(const char *fn, void *dest, const void *src, ptrdiff_t dst, ptrdiff_t sst, size_t n,
                       size_t w, int pe) {
    check_pe(fn, pe);
    if (n == 0) return;
    if (dst <= 0 || sst <= 0) bad(fn, "strides must be positive (dst %td, sst %td)", dst, sst);
    uint64_t s = sym(fn, src, ((n - 1) * (size_t)sst + 1) * w);
    char *packed = malloc(n * w);
    if (!packed) die(fn, "out of memory");
    struct req r = {0};
    r.op = OP_IGET;
    r.aux = (uint32_t)w;
    r.a[0] = s;
    r.a[1] = (uint64_t)sst;
    r.a[2] = n;
    r.a[3] = (uint64_t)pe;
    call(fn, &r, NULL, 0, packed, n * w);
    for (size_t i = 0; i < n; i++) memcpy((char *)dest + i * (size_t)dst * w, packed + i * w, w);
    free(packed);
}

static void put_signal_bytes(const char *fn, void *dest, const void *src, size_t len, uint64_t *sig,
                             uint64_t signal, int sig_op, int pe) {
    check_pe(fn, pe);
    if (sig_op != SHMEM_SIGNAL_SET && sig_op != SHMEM_SIGNAL_ADD)
        bad(fn, "sig_op %d is neither SHMEM_SIGNAL_SET nor SHMEM_SIGNAL_ADD", sig_op);
    struct req r = {0};
    r.op = OP_PUT_SIGNAL;
    r.a[0] = sym(fn, dest, len);
    r.a[1] = sym(fn, sig, 8);
    r.a[2] = signal;
    r.a[3] = (uint64_t)sig_op;
    r.a[4] = (uint64_t)pe;
    call(fn, &r, src, len, NULL, 0);
}

#define DEF_RMA(N, T) \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe) { \
        put_bytes(__func__, dest, source, nelems * sizeof(T), pe, 0); \
    } \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe) { \
        put_bytes(__func__, dest, source, nelems * sizeof(T), pe, 1); \
    } \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe) { \
        get_bytes(__func__, dest, source, nelems * sizeof(T), pe, 0); \
    } \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe) { \
        get_bytes(__func__, dest, source, nelems * sizeof(T), pe, 1); \
    } \
    void shmem_##N##_p(T *dest, T value, int pe) { put_bytes(__func__, dest, &value, sizeof(T), pe, 0); } \
    T shmem_##N##_g(const T *source, int pe) { \
        T v; \
        get_bytes(__func__, &v, source, sizeof(T), pe, 0); \
        return v; \
    } \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { \
        iput_bytes(__func__, dest, source, dst, sst, nelems, sizeof(T), pe); \
    } \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { \
        iget_bytes(__func__, dest, source, dst, sst, nelems, sizeof(T), pe); \
    } \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, \
                                int sig_op, int pe) { \
        put_signal_bytes(__func__, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe); \
    } \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, \
                                    uint64_t signal, int sig_op, int pe) { \
        put_signal_bytes(__func__, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe); \
    }
HPCNET_RMA_TYPES(DEF_RMA)

#define DEF_SIZED(B, W) \
    void shmem_put##B(void *dest, const void *source, size_t nelems, int pe) { \
        put_bytes(__func__, dest, source, nelems * W, pe, 0); \
    } \
    void shmem_put##B##_nbi(void *dest, const void *source, size_t nelems, int pe) { \
        put_bytes(__func__, dest, source, nelems * W, pe, 1); \
    } \
    void shmem_get##B(void *dest, const void *source, size_t nelems, int pe) { \
        get_bytes(__func__, dest, source, nelems * W, pe, 0); \
    } \
    void shmem_get##B##_nbi(void *dest, const void *source, size_t nelems, int pe) { \
        get_bytes(__func__, dest, source, nelems * W, pe, 1); \
    } \
    void shmem_iput##B(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { \
        iput_bytes(__func__, dest, source, dst, sst, nelems, W, pe); \
    } \
    void shmem_iget##B(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) { \
        iget_bytes(__func__, dest, source, dst, sst, nelems, W, pe); \
    } \
    void shmem_put##B##_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, \
                               uint64_t signal, int sig_op, int pe) { \
        put_signal_bytes(__func__, dest, source, nelems * W, sig_addr, signal, sig_op, pe); \
    } \
    void shmem_put##B##_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, \
                                   uint64_t signal, int sig_op, int pe) { \
        put_signal_bytes(__func__, dest, source, nelems * W, sig_addr, signal, sig_op, pe); \
    }
HPCNET_SIZES(DEF_SIZED)

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe) {
    put_bytes(__func__, dest, source, nelems, pe, 0);
}
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe) {
    put_bytes(__func__, dest, source, nelems, pe, 1);
}
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe) {
    get_bytes(__func__, dest, source, nelems, pe, 0);
}
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe) {
    get_bytes(__func__, dest, source, nelems, pe, 1);
}
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal,
                         int sig_op, int pe) {
    put_signal_bytes(__func__, dest, source, nelems, sig_addr, signal, sig_op, pe);
}
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                             uint64_t signal, int sig_op, int pe) {
    put_signal_bytes(__func__, dest, source, nelems, sig_addr, signal, sig_op, pe);
}
uint64_t shmem_signal_fetch(const uint64_t *sig_addr) {
    sym(__func__, sig_addr, 8);
    return *(const volatile uint64_t *)sig_addr;
}
static int check_cmp(const char *fn, int cmp) {
    if (cmp < SHMEM_CMP_EQ || cmp > SHMEM_CMP_GE) bad(fn, "comparison %d is not one of SHMEM_CMP_*", cmp);
    return cmp;
}
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value) {
    const char *fn = __func__;
    return call0(fn, OP_SIGNAL_WAIT, 0, sym(fn, sig_addr, 8), (uint64_t)check_cmp(fn, cmp), cmp_value, 0).v[0];
}

/* ---- atomics ----------------------------------------------------------------------------- */

static uint64_t amo(const char *fn, int op, void *dest, size_t w, uint64_t value, uint64_t cond, int pe) {
    check_pe(fn, pe);
    uint64_t d = sym(fn, dest, w);
    if (((uintptr_t)dest) % w != 0) bad(fn, "address %p is not aligned to the %zu bytes of the type", dest, w);
    return call0(fn, OP_AMO, (uint32_t)op | (uint32_t)(w << 8), d, value, cond, (uint64_t)pe).v[0];
}

static uint64_t bits_of(const void *v, size_t w) {
    uint64_t b = 0;
    memcpy(&b, v, w);
    return b;
}

#define AMO_VAL(T, x) ({ T _v = (x); bits_of(&_v, sizeof(T)); })
#define AMO_RET(T, b) ({ uint64_t _b = (b); T _r; memcpy(&_r, &_b, sizeof(T)); _r; })

#define DEF_EXT_AMO(N, T) \
    T shmem_##N##_atomic_fetch(const T *source, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FETCH, (void *)source, sizeof(T), 0, 0, pe)); \
    } \
    void shmem_##N##_atomic_set(T *dest, T value, int pe) { \
        amo(__func__, AMO_SET, dest, sizeof(T), AMO_VAL(T, value), 0, pe); \
    } \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_SWAP, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    } \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe) { \
        *fetch = AMO_RET(T, amo(__func__, AMO_FETCH, (void *)source, sizeof(T), 0, 0, pe)); \
    } \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe) { \
        *fetch = AMO_RET(T, amo(__func__, AMO_SWAP, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    }
HPCNET_EXT_AMO_TYPES(DEF_EXT_AMO)

#define DEF_AMO(N, T) \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_CSWAP, dest, sizeof(T), AMO_VAL(T, value), AMO_VAL(T, cond), pe)); \
    } \
    void shmem_##N##_atomic_add(T *dest, T value, int pe) { \
        amo(__func__, AMO_ADD, dest, sizeof(T), AMO_VAL(T, value), 0, pe); \
    } \
    void shmem_##N##_atomic_inc(T *dest, int pe) { amo(__func__, AMO_ADD, dest, sizeof(T), 1, 0, pe); } \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FADD, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    } \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FADD, dest, sizeof(T), 1, 0, pe)); \
    } \
    void shmem_##N##_atomic_and(T *dest, T value, int pe) { \
        amo(__func__, AMO_AND, dest, sizeof(T), AMO_VAL(T, value), 0, pe); \
    } \
    void shmem_##N##_atomic_or(T *dest, T value, int pe) { \
        amo(__func__, AMO_OR, dest, sizeof(T), AMO_VAL(T, value), 0, pe); \
    } \
    void shmem_##N##_atomic_xor(T *dest, T value, int pe) { \
        amo(__func__, AMO_XOR, dest, sizeof(T), AMO_VAL(T, value), 0, pe); \
    } \
    T shmem_##N##_atomic_fetch_and(T *dest, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FAND, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    } \
    T shmem_##N##_atomic_fetch_or(T *dest, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FOR, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    } \
    T shmem_##N##_atomic_fetch_xor(T *dest, T value, int pe) { \
        return AMO_RET(T, amo(__func__, AMO_FXOR, dest, sizeof(T), AMO_VAL(T, value), 0, pe)); \
    } \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe) { \
        *fetch = shmem_##N##_atomic_compare_swap(dest, cond, value, pe); \
    } \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe) { \
        *fetch = shmem_##N##_atomic_fetch_add(dest, value, pe); \
    } \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe) { \
        *fetch = shmem_##N##_atomic_fetch_inc(dest, pe); \
    }
HPCNET_AMO_TYPES(DEF_AMO)

#define DEF_OLD_AMO(N, T) \
    T shmem_##N##_fadd(T *dest, T value, int pe) { return shmem_##N##_atomic_fetch_add(dest, value, pe); } \
    T shmem_##N##_finc(T *dest, int pe) { return shmem_##N##_atomic_fetch_inc(dest, pe); } \
    void shmem_##N##_add(T *dest, T value, int pe) { shmem_##N##_atomic_add(dest, value, pe); } \
    void shmem_##N##_inc(T *dest, int pe) { shmem_##N##_atomic_inc(dest, pe); } \
    T shmem_##N##_cswap(T *dest, T cond, T value, int pe) { \
        return shmem_##N##_atomic_compare_swap(dest, cond, value, pe); \
    }
#define DEF_OLD_EXT(N, T) \
    T shmem_##N##_swap(T *dest, T value, int pe) { return shmem_##N##_atomic_swap(dest, value, pe); } \
    T shmem_##N##_fetch(const T *source, int pe) { return shmem_##N##_atomic_fetch(source, pe); } \
    void shmem_##N##_set(T *dest, T value, int pe) { shmem_##N##_atomic_set(dest, value, pe); }
HPCNET_OLD_AMO_TYPES(DEF_OLD_AMO)
HPCNET_OLD_AMO_TYPES(DEF_OLD_EXT)
DEF_OLD_EXT(float, float)
DEF_OLD_EXT(double, double)
long shmem_swap(long *dest, long value, int pe) {
    return shmem_long_atomic_swap(dest, value, pe);
}

/* ---- ordering and synchronisation -------------------------------------------------------- */

void shmem_fence(void) {
    call0(__func__, OP_FENCE, 0, 0, 0, 0, 0);
}
void shmem_quiet(void) {
    call0(__func__, OP_QUIET, 0, 0, 0, 0, 0);
}
void shmem_barrier_all(void) {
    call0(__func__, OP_BARRIER_ALL, 0, 0, 0, 0, 0);
}
void shmem_sync_all(void) {
    call0(__func__, OP_SYNC_ALL, 0, 0, 0, 0, 0);
}
static uint64_t stride_of(const char *fn, int log) {
    if (log < 0 || log > 30) bad(fn, "logPE_stride %d is outside 0..30", log);
    return (uint64_t)1 << log;
}
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync) {
    (void)pSync;
    const char *fn = __func__;
    call0(fn, OP_BARRIER, 0, (uint64_t)PE_start, stride_of(fn, logPE_stride), (uint64_t)PE_size, 0);
}
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync) {
    (void)pSync;
    const char *fn = __func__;
    call0(fn, OP_SYNC, 0, (uint64_t)PE_start, stride_of(fn, logPE_stride), (uint64_t)PE_size, 0);
}

/* Point synchronisation: the type travels as its width, plus 0x10 when signed. */
#define SYNC_CODE(T) ((uint32_t)sizeof(T) | (((T)-1 < (T)0) ? 0x10u : 0u))

static uint64_t wait_vec(const char *fn, uint32_t code, int kind, int test, void *ivars, size_t n,
                         const int *status, int cmp, uint64_t value, size_t *indices) {
    check_cmp(fn, cmp);
    size_t w = code & 0xf;
    struct req r = {0};
    r.op = OP_WAIT_VEC;
    r.aux = (uint32_t)cmp | (code << 8) | ((uint32_t)kind << 16) | ((uint32_t)test << 24);
    r.a[0] = n ? sym(fn, ivars, n * w) : 0;
    r.a[1] = n;
    r.a[2] = value;
    unsigned char *st = NULL;
    if (status && n) {
        st = malloc(n);
        if (!st) die(fn, "out of memory");
        for (size_t i = 0; i < n; i++) st[i] = status[i] != 0;
    }
    uint64_t *idx = kind == 2 && n ? malloc(n * 8) : NULL;
    struct rep p = call(fn, &r, st, st ? n : 0, idx, idx ? n * 8 : 0);
    if (idx && indices)
        for (uint64_t i = 0; i < p.v[0]; i++) indices[i] = (size_t)idx[i];
    free(st);
    free(idx);
    return p.v[0];
}

#define DEF_SYNC(N, T) \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value) { \
        const char *fn = __func__; \
        check_cmp(fn, cmp); \
        call0(fn, OP_WAIT, (uint32_t)cmp | (SYNC_CODE(T) << 8), sym(fn, ivar, sizeof(T)), \
              AMO_VAL(T, cmp_value), 0, 0); \
    } \
    void shmem_##N##_wait(T *ivar, T cmp_value) { \
        const char *fn = __func__; \
        call0(fn, OP_WAIT, (uint32_t)SHMEM_CMP_NE | (SYNC_CODE(T) << 8), sym(fn, ivar, sizeof(T)), \
              AMO_VAL(T, cmp_value), 0, 0); \
    } \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { \
        wait_vec(__func__, SYNC_CODE(T), 0, 0, ivars, nelems, status, cmp, AMO_VAL(T, cmp_value), NULL); \
    } \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { \
        return (size_t)wait_vec(__func__, SYNC_CODE(T), 1, 0, ivars, nelems, status, cmp, \
                                AMO_VAL(T, cmp_value), NULL); \
    } \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, \
                                       T cmp_value) { \
        return (size_t)wait_vec(__func__, SYNC_CODE(T), 2, 0, ivars, nelems, status, cmp, \
                                AMO_VAL(T, cmp_value), indices); \
    } \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value) { \
        return (int)wait_vec(__func__, SYNC_CODE(T), 0, 1, ivar, 1, NULL, cmp, AMO_VAL(T, cmp_value), NULL); \
    } \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { \
        return (int)wait_vec(__func__, SYNC_CODE(T), 0, 1, ivars, nelems, status, cmp, AMO_VAL(T, cmp_value), \
                             NULL); \
    } \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value) { \
        return (size_t)wait_vec(__func__, SYNC_CODE(T), 1, 1, ivars, nelems, status, cmp, \
                                AMO_VAL(T, cmp_value), NULL); \
    } \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, \
                                 T cmp_value) { \
        return (size_t)wait_vec(__func__, SYNC_CODE(T), 2, 1, ivars, nelems, status, cmp, \
                                AMO_VAL(T, cmp_value), indices); \
    }
HPCNET_SYNC_TYPES(DEF_SYNC)

void shmem_wait(long *ivar, long cmp_value) {
    shmem_long_wait(ivar, cmp_value);
}
void(shmem_wait_until)(long *ivar, int cmp, long cmp_value) {
    shmem_long_wait_until(ivar, cmp, cmp_value);
}

static void lock_op(const char *fn, int op, long *lock, uint64_t *out) {
    if (((uintptr_t)lock) % 8 != 0) bad(fn, "lock at %p is not 8-byte aligned", (void *)lock);
    uint64_t v = call0(fn, (uint32_t)op, 0, sym(fn, lock, sizeof(long)), 0, 0, 0).v[0];
    if (out) *out = v;
}
void shmem_set_lock(long *lock) {
    lock_op(__func__, OP_LOCK_SET, lock, NULL);
}
void shmem_clear_lock(long *lock) {
    lock_op(__func__, OP_LOCK_CLEAR, lock, NULL);
}
int shmem_test_lock(long *lock) {
    uint64_t v;
    lock_op(__func__, OP_LOCK_TEST, lock, &v);
    return (int)v;
}

/* ---- teams ------------------------------------------------------------------------------- */

int shmem_team_my_pe(shmem_team_t t) {
    if (!t) return -1;
    int d = hs_me - t->start;
    if (d < 0 || d % t->stride != 0 || d / t->stride >= t->size) return -1;
    return d / t->stride;
}
int shmem_team_n_pes(shmem_team_t t) {
    return t ? t->size : -1;
}
int shmem_team_translate_pe(shmem_team_t src, int src_pe, shmem_team_t dest) {
    if (!src || !dest || src_pe < 0 || src_pe >= src->size) return -1;
    int world = src->start + src_pe * src->stride;
    int d = world - dest->start;
    if (d < 0 || d % dest->stride != 0 || d / dest->stride >= dest->size) return -1;
    return d / dest->stride;
}
int shmem_team_split_strided(shmem_team_t parent, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask, shmem_team_t *new_team) {
    (void)config;
    (void)config_mask;
    const char *fn = __func__;
    *new_team = SHMEM_TEAM_INVALID;
    if (!parent) bad(fn, "the parent team is SHMEM_TEAM_INVALID");
    if (size <= 0 || stride <= 0 || start < 0 || start + (size - 1) * stride >= parent->size)
        bad(fn, "start %d, stride %d, size %d do not fit the parent team of %d PEs", start, stride, size,
            parent->size);
    struct hpcnet_team t = {parent->start + start * parent->stride, parent->stride * stride, size};
    int d = hs_me - t.start;
    if (d < 0 || d % t.stride != 0 || d / t.stride >= t.size) return 0;
    shmem_team_t n = malloc(sizeof *n);
    if (!n) die(fn, "out of memory");
    *n = t;
    *new_team = n;
    return 0;
}
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config) {
    (void)team;
    (void)config_mask;
    if (config) config->num_contexts = 0;
    return 0;
}
void shmem_team_destroy(shmem_team_t team) {
    if (team && team != SHMEM_TEAM_WORLD && team != SHMEM_TEAM_SHARED) free(team);
}
static void team_args(const char *fn, shmem_team_t t, struct req *r) {
    if (!t) bad(fn, "the team is SHMEM_TEAM_INVALID");
    r->a[4] = (uint64_t)t->start;
    r->a[5] = (uint64_t)t->stride;
    r->a[6] = (uint64_t)t->size;
}
int shmem_team_sync(shmem_team_t team) {
    struct req r = {0};
    team_args(__func__, team, &r);
    call0(__func__, OP_SYNC, 0, r.a[4], r.a[5], r.a[6], 0);
    return 0;
}

/* ---- collectives ------------------------------------------------------------------------- */

/* The collectives layer moves 4- and 8-byte elements: other element sizes travel as 4-byte
 * words when the byte count allows. */
static uint32_t coll_width(const char *fn, size_t *nelems, size_t w) {
    if (w == 4 || w == 8) return (uint32_t)w;
    size_t bytes = *nelems * w;
    if (bytes % 4 != 0)
        bad(fn, "%zu elements of %zu bytes: this library's collectives move whole 4-byte words", *nelems, w);
    *nelems = bytes / 4;
    return 4;
}

static void coll(const char *fn, int op, uint32_t aux, void *dest, size_t dest_len, const void *src,
                 size_t src_len, size_t nelems, int root, struct req *r) {
    r->op = (uint32_t)op;
    r->aux = aux;
    r->a[0] = sym(fn, dest, dest_len);
    r->a[1] = sym(fn, src, src_len);
    r->a[2] = nelems;
    r->a[3] = (uint64_t)root;
    call(fn, r, NULL, 0, NULL, 0);
}

static void active_set(const char *fn, struct req *r, int start, int log, int size) {
    r->a[4] = (uint64_t)start;
    r->a[5] = stride_of(fn, log);
    r->a[6] = (uint64_t)size;
}

#define ACTIVE_SET_COLLS(B, W) \
    void shmem_broadcast##B(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, \
                            int logPE_stride, int PE_size, long *pSync) { \
        (void)pSync; \
        struct req r = {0}; \
        active_set(__func__, &r, PE_start, logPE_stride, PE_size); \
        coll(__func__, OP_BCAST, W | 0x100, dest, nelems * W, source, nelems * W, nelems, PE_root, &r); \
    } \
    void shmem_collect##B(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, \
                          int PE_size, long *pSync) { \
        (void)pSync; \
        struct req r = {0}; \
        active_set(__func__, &r, PE_start, logPE_stride, PE_size); \
        coll(__func__, OP_COLLECT, W, dest, 0, source, nelems * W, nelems, 0, &r); \
    } \
    void shmem_fcollect##B(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, \
                           int PE_size, long *pSync) { \
        (void)pSync; \
        struct req r = {0}; \
        active_set(__func__, &r, PE_start, logPE_stride, PE_size); \
        coll(__func__, OP_FCOLLECT, W, dest, nelems * W * (size_t)PE_size, source, nelems * W, nelems, 0, &r); \
    } \
    void shmem_alltoall##B(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, \
                           int PE_size, long *pSync) { \
        (void)pSync; \
        struct req r = {0}; \
        active_set(__func__, &r, PE_start, logPE_stride, PE_size); \
        size_t all = nelems * W * (size_t)PE_size; \
        coll(__func__, OP_ALLTOALL, W, dest, all, source, all, nelems, 0, &r); \
    }
ACTIVE_SET_COLLS(32, 4)
ACTIVE_SET_COLLS(64, 8)

static int team_coll(const char *fn, int op, shmem_team_t team, void *dest, const void *src, size_t nelems,
                     size_t w, int root) {
    struct req r = {0};
    team_args(fn, team, &r);
    size_t n = nelems;
    uint32_t cw = coll_width(fn, &n, w);
    size_t bytes = nelems * w, members = (size_t)team->size;
    size_t dlen = op == OP_BCAST ? bytes : op == OP_COLLECT ? 0 : bytes * members;
    size_t slen = op == OP_ALLTOALL ? bytes * members : bytes;
    coll(fn, op, cw, dest, dlen, src, slen, n, root, &r);
    return 0;
}
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root) {
    return team_coll(__func__, OP_BCAST, team, dest, source, nelems, 1, PE_root);
}
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return team_coll(__func__, OP_COLLECT, team, dest, source, nelems, 1, 0);
}
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return team_coll(__func__, OP_FCOLLECT, team, dest, source, nelems, 1, 0);
}
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems) {
    return team_coll(__func__, OP_ALLTOALL, team, dest, source, nelems, 1, 0);
}
#define DEF_TEAM_COLL(N, T) \
    int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root) { \
        return team_coll(__func__, OP_BCAST, team, dest, source, nelems, sizeof(T), PE_root); \
    } \
    int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems) { \
        return team_coll(__func__, OP_COLLECT, team, dest, source, nelems, sizeof(T), 0); \
    } \
    int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems) { \
        return team_coll(__func__, OP_FCOLLECT, team, dest, source, nelems, sizeof(T), 0); \
    } \
    int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems) { \
        return team_coll(__func__, OP_ALLTOALL, team, dest, source, nelems, sizeof(T), 0); \
    }
HPCNET_RMA_TYPES(DEF_TEAM_COLL)

#define DTYPE(T) ((T)0.5 != 0 ? (sizeof(T) == 4 ? DT_F32 : DT_F64) : (sizeof(T) == 4 ? DT_I32 : DT_I64))
#define DEF_REDUCE(N, T, OP, CODE) \
    void shmem_##N##_##OP##_to_all(T *dest, const T *source, int nreduce, int PE_start, int logPE_stride, \
                                   int PE_size, T *pWrk, long *pSync) { \
        (void)pWrk; \
        (void)pSync; \
        const char *fn = __func__; \
        if (nreduce < 0) bad(fn, "nreduce %d is negative", nreduce); \
        struct req r = {0}; \
        active_set(fn, &r, PE_start, logPE_stride, PE_size); \
        size_t len = (size_t)nreduce * sizeof(T); \
        coll(fn, OP_REDUCE, CODE | (DTYPE(T) << 8), dest, len, source, len, (size_t)nreduce, 0, &r); \
    } \
    int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce) { \
        const char *fn = __func__; \
        struct req r = {0}; \
        team_args(fn, team, &r); \
        size_t len = nreduce * sizeof(T); \
        coll(fn, OP_REDUCE, CODE | (DTYPE(T) << 8), dest, len, source, len, nreduce, 0, &r); \
        return 0; \
    }
#define DEF_BITWISE(N, T) DEF_REDUCE(N, T, and, RED_AND) DEF_REDUCE(N, T, or, RED_OR) DEF_REDUCE(N, T, xor, RED_XOR)
#define DEF_ARITH(N, T) DEF_REDUCE(N, T, sum, RED_SUM) DEF_REDUCE(N, T, prod, RED_PROD) \
    DEF_REDUCE(N, T, min, RED_MIN) DEF_REDUCE(N, T, max, RED_MAX)
HPCNET_BITWISE_REDUCE_TYPES(DEF_BITWISE)
HPCNET_ARITH_REDUCE_TYPES(DEF_ARITH)

/* ---- the simulated clock ----------------------------------------------------------------- */

/* Between shmem_init and shmem_finalize the program's wall clocks (clock_gettime of the
 * real-time and monotonic clocks, gettimeofday) read this PE's simulated time, so that a
 * benchmark timing itself the usual way reports simulated figures. CPU-time clocks, and every
 * clock outside that span, are the host's. */
static uint64_t hs_last_ps;

static int simulated(clockid_t id) {
    return hs_fd >= 0 && (id == CLOCK_REALTIME || id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW ||
                          id == CLOCK_REALTIME_COARSE || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_BOOTTIME);
}

static uint64_t sim_ps(void) {
    if (!hs_finalized) hs_last_ps = call0("clock_gettime", OP_TIME, 0, 0, 0, 0, 0).v[0];
    return hs_last_ps;
}

int clock_gettime(clockid_t id, struct timespec *t) {
    if (!simulated(id)) return host_clock(id, t);
    uint64_t ps = sim_ps();
    t->tv_sec = (time_t)(ps / 1000000000000u);
    t->tv_nsec = (long)(ps % 1000000000000u / 1000u);
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    if (hs_fd < 0) return (int)syscall(SYS_gettimeofday, tv, NULL);
    uint64_t ps = sim_ps();
    tv->tv_sec = (time_t)(ps / 1000000000000u);
    tv->tv_usec = (long)(ps % 1000000000000u / 1000000u);
    return 0;
}
