/*
 * shim.c - gitmd's CUPTI injection library (libgitm_shim.so), loaded by the CUDA driver through
 * CUDA_INJECTION64_PATH into every CUDA process of a registered job.
 *
 * Workflow in brief:
 *   1. InitializeInjection (once, inside cuInit): read GITM_JOB_DIR, create this process's ring
 *      file there, register CUPTI activity buffer callbacks, start the control thread. Nothing is
 *      collected yet: every activity kind stays disabled.
 *   2. The control thread polls the control page the daemon writes. When the daemon opens a
 *      window it checks that no other CUPTI subscriber is present (else it steps aside), writes a
 *      clock pair and a window marker, and enables the asked activity kinds; while the window is
 *      open it flushes CUPTI's buffers periodically; when the window closes (or the daemon's
 *      heartbeat goes stale) it disables the kinds, flushes, and writes the closing marker.
 *   3. CUPTI hands completed buffers to BufferCompleted, which turns each activity record into a
 *      64-byte ring record (kernel names interned: a NAME record the first time a name is seen).
 *   4. Windows close disable-only, and by default CUPTI is never detached: cuptiFinalize in a
 *      running process killed unmodified jobs on the H200 (CUDA 13.0): the finalize, made from one
 *      thread's driver API exit callback as NVIDIA advises, raced with another thread's kernel
 *      launch inside CUPTI (timm's training benchmark: SIGSEGV in the autograd thread's
 *      cuLaunchKernel -> libcupti, 2 of 3 runs, bench/results/2026-12-03-crash-h200.md; kineto and
 *      PAPI report segfaults around CUPTI teardown too). The price: disabling activity leaves a
 *      residual per-launch cost (+42% on a launch-bound loop, ~0.4% on a training step;
 *      pytorch#144455), so the daemon observes a process in one stretch and then gives it no
 *      window again. The residual is per kind (bench/cupti_residual.py, H200 2026-12-04): the
 *      largest, SYNCHRONIZATION activity's, is avoided by timing syncs from their callbacks. GITM_SHIM_DETACH=1 (capture.detach_cupti) lets the daemon's
 *      GITM_KNOB_DETACH finalize once, never attached again after (windows asked later are
 *      refused), not while the process is starting (detach_rule.h: then owed);
 *      GITM_SHIM_DETACH=every is the old cycle (detach at each quiet close, attach again at the
 *      next window), kept only for bench/window_stress.py.
 *   5. At exit, at_exit takes cupti_lock and marks the process exiting: from then the control thread
 *      makes no CUPTI or CUDA call (CUPTI tears down with the process).
 *
 * Fail open: no exit/abort, no signal handlers, no CUDA calls inside CUPTI callbacks. Any error
 * switches the shim off (status OFF with the reason in the ring header) and the job runs on.
 * After fork() without exec the child is inert: it never writes the parent's ring.
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gitm_shim.h"
#include "detach_rule.h"
#include "guard.h"
#include "names.h"
#include "ring.h"

/* ---- CUPTI, loaded at run time ------------------------------------------------------------------ *
 * The shim does not link libcupti: a package built on one host must not carry that host's CUDA path
 * (an rpath) nor fail to load where CUDA lives elsewhere. initialize() opens it (load_cupti: a copy
 * the process loaded already, else GITM_CUPTI_PATH, else the dynamic linker's search, else the usual
 * toolkit folders) and every CUPTI call below goes through these pointers (the macros after them).
 * Each is asked of the
 * process's global scope first: with the free guard preloaded that is the guard's interposer, which
 * must see the shim's calls as it did when the shim linked libcupti (it tells them from the job's
 * by their return address). */
#define CUPTI_FUNCTIONS(X)                                                                                     \
    X(cuptiActivityDisable)                                                                                    \
    X(cuptiActivityEnable)                                                                                     \
    X(cuptiActivityFlushAll)                                                                                   \
    X(cuptiActivityGetNextRecord)                                                                              \
    X(cuptiActivityGetNumDroppedRecords)                                                                       \
    X(cuptiActivityRegisterCallbacks)                                                                          \
    X(cuptiEnableCallback)                                                                                     \
    X(cuptiEnableDomain)                                                                                       \
    X(cuptiFinalize)                                                                                           \
    X(cuptiGetResultString)                                                                                    \
    X(cuptiGetStreamIdEx)                                                                                      \
    X(cuptiGetTimestamp)                                                                                       \
    X(cuptiGetVersion)                                                                                         \
    X(cuptiSubscribe)                                                                                          \
    X(cuptiUnsubscribe)
#define CUPTI_POINTER(name) static __typeof__(name) *p_##name;
CUPTI_FUNCTIONS(CUPTI_POINTER)
#define cuptiActivityDisable (*p_cuptiActivityDisable)
#define cuptiActivityEnable (*p_cuptiActivityEnable)
#define cuptiActivityFlushAll (*p_cuptiActivityFlushAll)
#define cuptiActivityGetNextRecord (*p_cuptiActivityGetNextRecord)
#define cuptiActivityGetNumDroppedRecords (*p_cuptiActivityGetNumDroppedRecords)
#define cuptiActivityRegisterCallbacks (*p_cuptiActivityRegisterCallbacks)
#define cuptiEnableCallback (*p_cuptiEnableCallback)
#define cuptiEnableDomain (*p_cuptiEnableDomain)
#define cuptiFinalize (*p_cuptiFinalize)
#define cuptiGetResultString (*p_cuptiGetResultString)
#define cuptiGetStreamIdEx (*p_cuptiGetStreamIdEx)
#define cuptiGetTimestamp (*p_cuptiGetTimestamp)
#define cuptiGetVersion (*p_cuptiGetVersion)
#define cuptiSubscribe (*p_cuptiSubscribe)
#define cuptiUnsubscribe (*p_cuptiUnsubscribe)

/* Where libcupti is looked for when GITM_CUPTI_PATH does not name it: the dynamic linker's own
 * search (a copy the job loaded already, by soname; LD_LIBRARY_PATH; ld.so.cache), then the usual
 * places of a CUDA toolkit (under $CUDA_HOME first). */
static const char *const CUPTI_DIRS[] = {
    "extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib", "lib",
};

static int loaded_cupti(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base && strncmp(base + 1, "libcupti.so", 11) == 0 && strlen(info->dlpi_name) < 4096) {
        strcpy((char *)out, info->dlpi_name); /* opened after the walk: no dlopen under its lock */
        return 1;
    }
    return 0;
}

static void *cupti_open(const char *path, char *tried, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t used = strlen(tried);
        if (used + 4 < n)
            snprintf(tried + used, n - used, "%s%s", used ? ", " : "", path);
    }
    return h;
}

/* libcupti opened and every function the shim calls found; else 0 with why in err. */
static int load_cupti(char *err, size_t n)
{
    char tried[1024] = "", soname[64], loaded[4096] = "";
    /* the soname of the CUDA the headers are from (cuda.h: 13000 is 13.0) */
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUDA_VERSION / 1000);
    void *h = NULL;
    const char *explicit = getenv("GITM_CUPTI_PATH");
    /* one CUPTI per process: a copy the job loaded already (torch's, by its wheel) is the one used,
     * whatever else is named; the free guard's interposers find that same copy */
    dl_iterate_phdr(loaded_cupti, loaded);
    if (loaded[0]) {
        h = dlopen(loaded, RTLD_NOW | RTLD_NOLOAD);
        if (!h)
            snprintf(tried, sizeof tried, "%s (loaded, not reopened)", loaded);
    } else if (explicit && *explicit) {
        h = cupti_open(explicit, tried, sizeof tried);
    } else {
        h = cupti_open(soname, tried, sizeof tried);
        const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
        for (size_t i = 0; !h && i < sizeof homes / sizeof homes[0]; i++) {
            if (!homes[i] || !*homes[i])
                continue;
            for (size_t j = 0; !h && j < sizeof CUPTI_DIRS / sizeof CUPTI_DIRS[0]; j++) {
                char path[4096];
                if (snprintf(path, sizeof path, "%s/%s/%s", homes[i], CUPTI_DIRS[j], soname) < (int)sizeof path)
                    h = cupti_open(path, tried, sizeof tried);
            }
        }
    }
    if (!h) {
        snprintf(err, n, "%s not found (tried %s); set GITM_CUPTI_PATH (capture.cupti_path) to it", soname, tried);
        return 0;
    }
    const char *missing = NULL;
#define CUPTI_RESOLVE(name)                                                                                    \
    if (!(p_##name = (__typeof__(name) *)dlsym(RTLD_DEFAULT, #name)))                                         \
        p_##name = (__typeof__(name) *)dlsym(h, #name);                                                      \
    if (!p_##name && !missing)                                                                                 \
        missing = #name;
    CUPTI_FUNCTIONS(CUPTI_RESOLVE)
#undef CUPTI_RESOLVE
    if (missing) {
        Dl_info info;
        const char *where = dladdr((void *)p_cuptiGetVersion, &info) && info.dli_fname ? info.dli_fname : "libcupti";
        snprintf(err, n, "%s has no %s: not the CUPTI the shim was built for", where, missing);
        return 0;
    }
    return 1;
}

#define EXPORT __attribute__((visibility("default")))
#define DEFAULT_RING_RECORDS (1u << 16)
#define DEFAULT_BUFFER_BYTES (4u << 20)
#define POLL_NS (20 * 1000 * 1000)
#define EXIT_LOCK_NS (2ULL * 1000 * 1000 * 1000)
#define DETACH_NEVER 0 /* the default */
#define DETACH_ONCE 1  /* GITM_SHIM_DETACH=1: once, when the daemon asks (GITM_KNOB_DETACH) */
#define DETACH_EVERY 2 /* legacy, benchmarks only: at each quiet close, attached again at the next window */

static struct {
    pthread_once_t once;
    int active;          /* the ring exists and the shim works */
    volatile int inert;  /* a forked child, or switched off */
    pid_t pid;
    struct gitm_ring ring;
    struct gitm_names names;
    pthread_t thread;
    uint32_t applied_seq;
    uint32_t enabled_mask;
    uint32_t window_id;
    uint64_t last_flush_ns;
    size_t buffer_bytes;
    int detach;                  /* DETACH_*: whether and when CUPTI may be finalized */
    volatile int detached;       /* cuptiFinalize was made: no CUPTI call of ours from now on */
    int detach_requested;        /* GITM_KNOB_DETACH came: this process's windows are over */
    int detach_pending;          /* set at close; taken by the next driver API exit callback */
    CUpti_SubscriberHandle detach_sub;
    int detach_subscribed;
    uint64_t start_mono_ns;      /* InitializeInjection */
    uint64_t detach_min_age_ns;
    uint64_t names_at_open;      /* names_interned when the window opened */
    uint64_t kernels_seen;       /* kernel records CUPTI delivered, ever */
    uint64_t kernels_at_open;
    int detach_owed;             /* a window closed without detaching (start-up): owed_detach() */
    uint64_t closed_at_ns;
    pthread_mutex_t cupti_lock;  /* serialises finalize (app thread) with window changes (control thread) */
    CUpti_SubscriberHandle payload_sub;
    int payload_subscribed;
    pthread_mutex_t payload_lock; /* the pending table; taken only in copy and sync API callbacks */
    int learning;                 /* launch callbacks note streams (GITM_KIND_STREAMS) */
    uint64_t learn_until_ns;
    int payload_on;               /* GITM_KIND_PAYLOAD granted in the open window */
    int hostsrc_on;               /* GITM_KIND_HOSTSRC granted in the open window */
    int sync_on;                  /* GITM_KIND_SYNC granted: sync calls timed by their callbacks */
    CUcontext copy_ctx;           /* the context of the last host-to-device copy seen (host register) */
    volatile int exiting;         /* at_exit ran: no more CUDA or CUPTI calls from the shim */
    uint32_t (*app_cupti)(void);  /* the free guard's view of the job's own CUPTI use (NULL: no guard) */
    uint64_t (*app_kinds)(void);
    void *(*app_completed)(void); /* the job's activity-buffer completion callback, if it registered one */
    int app_acted;                /* the job enabled a kind or registered callbacks: give up the window */
    uint32_t yield_share;         /* GITM_KNOB_YIELD: permille of each period launches are held (0: off) */
    uint64_t yield_period_ns;
    uint64_t yield_until_ns;      /* CLOCK_MONOTONIC: the yield lifts itself then */
    uint64_t flags[GITM_FLAGS];       /* GITM_KNOB_FLAG: read by the process's hooks (gitm_shim_flag) */
    uint64_t flag_reads[GITM_FLAGS];
    int debug;                    /* GITM_SHIM_DEBUG=1: timings of the shim's own steps on stderr */
} g = {.once = PTHREAD_ONCE_INIT,
       .cupti_lock = PTHREAD_MUTEX_INITIALIZER,
       .payload_lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* GITM_SHIM_DEBUG=1: one line on stderr per step of the shim's own (what it costs a short run:
 * bench/run_cost.py); milliseconds since InitializeInjection. Off by default. Formatted into a buffer
 * and written with one write(2), errors ignored: no stdio lock (at_exit may run while the control
 * thread writes), nothing if the job closed stderr, no SIGPIPE raised through stdio buffering. */
#define DEBUG_MS(t0) ((double)(mono_ns() - (t0)) / 1e6)
#define DEBUG(...)                                                                                          \
    do {                                                                                                    \
        if (g.debug)                                                                                        \
            debug_line(__VA_ARGS__);                                                                        \
    } while (0)

__attribute__((format(printf, 1, 2))) static void debug_line(const char *fmt, ...)
{
    char line[256];
    int n = snprintf(line, sizeof line, "gitm shim %d +%.1f ms: ", (int)getpid(), DEBUG_MS(g.start_mono_ns));
    if (n < 0 || (size_t)n >= sizeof line - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = strnlen(line, sizeof line - 1);
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Switch off, keep the job running, and say why in the ring header. */
static void switch_off(int32_t code, const char *what)
{
    char reason[GITM_STATUS_REASON_LEN];
    const char *text = NULL;
    if (code && p_cuptiGetResultString)
        cuptiGetResultString((CUptiResult)code, &text);
    snprintf(reason, sizeof reason, "%s%s%s", what, text ? ": " : "", text ? text : "");
    g.inert = 1;
    gitm_ring_set_status(&g.ring, GITM_STATUS_OFF, code, reason);
}

static struct gitm_record *reserve(uint64_t *pos)
{
    if (g.inert || getpid() != g.pid)
        return NULL;
    struct gitm_record *rec = gitm_ring_reserve(&g.ring, pos);
    if (rec)
        memset((char *)rec + sizeof rec->seq, 0, GITM_RECORD_SIZE - sizeof rec->seq);
    return rec;
}

static void publish(struct gitm_record *rec, uint64_t pos)
{
    gitm_ring_publish(rec, pos);
    __atomic_fetch_add(&g.ring.hdr->records_written, 1, __ATOMIC_RELAXED);
}

/* ---- records -------------------------------------------------------------------------------- */

static void emit_name(uint32_t id, const char *name)
{
    size_t len = strlen(name);
    uint16_t chunk = 0;
    for (size_t off = 0; off == 0 || off < len; off += GITM_NAME_CHUNK, chunk++) {
        uint64_t pos;
        struct gitm_record *rec = reserve(&pos);
        if (!rec)
            return;
        size_t n = len - off < GITM_NAME_CHUNK ? len - off : GITM_NAME_CHUNK;
        rec->type = GITM_REC_NAME;
        rec->correlation_id = id;
        rec->device = chunk;
        rec->flags = off + GITM_NAME_CHUNK >= len ? 1 : 0;
        memcpy((char *)&rec->start_ns, name + off, n);
        publish(rec, pos);
        if (len == 0)
            break;
    }
}

static uint32_t intern(const char *name)
{
    int is_new = 0;
    uint32_t id = gitm_names_intern(&g.names, name ? name : "?", &is_new);
    if (is_new) {
        emit_name(id, name ? name : "?");
        __atomic_fetch_add(&g.ring.hdr->names_interned, 1, __ATOMIC_RELAXED);
    }
    return id;
}

static void write_clock_pair(void)
{
    uint64_t cupti = 0;
    uint64_t m0 = mono_ns();
    if (cuptiGetTimestamp(&cupti) != CUPTI_SUCCESS)
        return;
    uint64_t m1 = mono_ns();
    uint64_t real = real_ns();
    struct gitm_ring_header *h = g.ring.hdr;
    uint32_t slot = h->clock_pair_count % GITM_CLOCK_PAIRS;
    h->clock_pairs[slot] = (struct gitm_clock_pair){cupti, m0 + (m1 - m0) / 2, real};
    __atomic_store_n(&h->clock_pair_count, h->clock_pair_count + 1, __ATOMIC_RELEASE);
    uint64_t pos;
    struct gitm_record *rec = reserve(&pos);
    if (!rec)
        return;
    rec->type = GITM_REC_CLOCK;
    rec->start_ns = cupti;
    rec->end_ns = m0 + (m1 - m0) / 2;
    ((struct gitm_clock_payload *)rec->payload)->real_ns = real;
    publish(rec, pos);
}

static void write_window_marker(uint32_t id, uint8_t open_close, uint32_t mask)
{
    uint64_t pos;
    uint64_t cupti = 0;
    cuptiGetTimestamp(&cupti);
    struct gitm_record *rec = reserve(&pos);
    if (!rec)
        return;
    rec->type = GITM_REC_WINDOW;
    rec->flags = open_close;
    rec->correlation_id = id;
    rec->start_ns = mono_ns();
    struct gitm_window_payload *w = (void *)rec->payload;
    w->kinds_mask = mask;
    w->cupti_ns = cupti;
    publish(rec, pos);
}

static void convert(const CUpti_Activity *a)
{
    uint64_t pos;
    struct gitm_record *rec;
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const void *)a;
        if (k->start == 0 && k->end == 0) {
            __atomic_fetch_add(&g.ring.hdr->missing_timestamps, 1, __ATOMIC_RELAXED);
            return;
        }
        uint32_t name_id = intern(k->name);
        __atomic_fetch_add(&g.kernels_seen, 1, __ATOMIC_RELAXED);
        if (!(rec = reserve(&pos)))
            return;
        rec->type = GITM_REC_KERNEL;
        rec->device = (uint16_t)k->deviceId;
        rec->correlation_id = k->correlationId;
        rec->start_ns = k->start;
        rec->end_ns = k->end;
        struct gitm_kernel_payload *p = (void *)rec->payload;
        p->name_id = name_id;
        p->stream_id = k->streamId;
        p->grid_x = (uint32_t)k->gridX;
        p->grid_y = (uint16_t)k->gridY;
        p->grid_z = (uint16_t)k->gridZ;
        p->block_x = (uint16_t)k->blockX;
        p->block_y = (uint16_t)k->blockY;
        p->block_z = (uint16_t)k->blockZ;
        p->registers = k->registersPerThread;
        p->shared_bytes = (uint32_t)(k->staticSharedMemory + k->dynamicSharedMemory);
        p->graph_id = k->graphId;
        publish(rec, pos);
        return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const void *)a;
        if (m->start == 0 && m->end == 0) {
            __atomic_fetch_add(&g.ring.hdr->missing_timestamps, 1, __ATOMIC_RELAXED);
            return;
        }
        if (!(rec = reserve(&pos)))
            return;
        rec->type = GITM_REC_MEMCPY;
        rec->flags = (m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) ? 1 : 0;
        rec->device = (uint16_t)m->deviceId;
        rec->correlation_id = m->correlationId;
        rec->start_ns = m->start;
        rec->end_ns = m->end;
        struct gitm_memcpy_payload *p = (void *)rec->payload;
        p->bytes = m->bytes;
        p->stream_id = m->streamId;
        p->copy_kind = m->copyKind;
        p->src_kind = m->srcKind;
        p->dst_kind = m->dstKind;
        publish(rec, pos);
        return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)a;
        if (m->start == 0 && m->end == 0) {
            __atomic_fetch_add(&g.ring.hdr->missing_timestamps, 1, __ATOMIC_RELAXED);
            return;
        }
        if (!(rec = reserve(&pos)))
            return;
        rec->type = GITM_REC_MEMSET;
        rec->device = (uint16_t)m->deviceId;
        rec->correlation_id = m->correlationId;
        rec->start_ns = m->start;
        rec->end_ns = m->end;
        struct gitm_memset_payload *p = (void *)rec->payload;
        p->bytes = m->bytes;
        p->stream_id = m->streamId;
        p->value = m->value;
        p->mem_kind = (uint8_t)m->memoryKind;
        publish(rec, pos);
        return;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const CUpti_ActivityMemory4 *m = (const void *)a;
        if (!(rec = reserve(&pos)))
            return;
        rec->type = GITM_REC_MEMORY;
        rec->device = (uint16_t)m->deviceId;
        rec->correlation_id = m->correlationId;
        rec->start_ns = m->timestamp;
        rec->end_ns = m->timestamp;
        struct gitm_memory_payload *p = (void *)rec->payload;
        p->address = m->address;
        p->bytes = m->bytes;
        p->stream_id = m->streamId;
        p->op = (uint8_t)m->memoryOperationType;
        p->mem_kind = (uint8_t)m->memoryKind;
        p->is_async = (uint8_t)m->isAsync;
        publish(rec, pos);
        return;
    }
    default:
        return;
    }
}

/* ---- CUPTI buffer callbacks (CUPTI's threads; never call CUDA here) ---------------------------- */

/* The buffers the shim handed CUPTI and has not had back. CUPTI's buffer callbacks are process-wide:
 * when the job's own profiler registers its callbacks while a buffer of ours is out (or ours were
 * registered while one of its buffers was out), a buffer can come back to the other side. Ours are
 * recognised here; one that is not ours is never parsed nor freed (it may be a C++ vector's
 * storage): it goes to the job's completion callback when the guard knows it, else it is left. */
#define OWN_BUFFERS 256
static uint8_t *_Atomic own_buffers[OWN_BUFFERS];

static int own_buffer_add(uint8_t *b)
{
    for (size_t i = 0; i < OWN_BUFFERS; i++) {
        uint8_t *expected = NULL;
        if (__atomic_compare_exchange_n(&own_buffers[i], &expected, b, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

static int own_buffer_take(uint8_t *b)
{
    for (size_t i = 0; i < OWN_BUFFERS && b; i++) {
        uint8_t *expected = b;
        if (__atomic_compare_exchange_n(&own_buffers[i], &expected, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *max_records = 0;
    *size = 0;
    *buffer = NULL;
    void *p = NULL;
    if (posix_memalign(&p, 8, g.buffer_bytes) == 0) {
        if (own_buffer_add(p)) {
            *buffer = p;
            *size = g.buffer_bytes;
        } else {
            free(p); /* 256 buffers out: CUPTI is not giving them back; drop rather than grow */
            DEBUG("buffer refused: %d buffers out", OWN_BUFFERS);
        }
    }
    /* No buffer: CUPTI counts the records it must drop; we read that count at each flush. */
}

typedef void (*completed_fn)(CUcontext, uint32_t, uint8_t *, size_t, size_t);

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    if (!buffer)
        return;
    if (!own_buffer_take(buffer)) {
        completed_fn theirs = g.app_completed ? (completed_fn)g.app_completed() : NULL;
        if (theirs && theirs != buffer_completed)
            theirs(ctx, stream, buffer, size, valid);
        return;
    }
    if (!g.inert && getpid() == g.pid) {
        CUpti_Activity *record = NULL;
        size_t n = 0;
        while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
            convert(record);
            n++;
        }
        __atomic_fetch_add(&g.ring.hdr->buffers_completed, 1, __ATOMIC_RELAXED);
        DEBUG("buffer completed: %zu records (%zu bytes), window %u", n, valid,
              __atomic_load_n(&g.window_id, __ATOMIC_RELAXED));
    }
    free(buffer);
}

/* The job (its profiler) holds CUPTI's one subscriber slot, or is taking it: the shim must not. */
static int app_holds_slot(void)
{
    return g.app_cupti && (g.app_cupti() & GITM_APP_SUBSCRIBED);
}

/* ---- detaching CUPTI between windows ----------------------------------------------------------- */

static void CUPTIAPI detach_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *info)
{
    (void)u;
    (void)d;
    (void)c;
    const CUpti_CallbackData *cb = info;
    if (cb->callbackSite != CUPTI_API_EXIT || !__atomic_load_n(&g.detach_pending, __ATOMIC_ACQUIRE) || g.exiting)
        return;
    if (pthread_mutex_trylock(&g.cupti_lock) != 0)
        return; /* the control thread is changing the window: try at the next call */
    if (!g.exiting && __atomic_exchange_n(&g.detach_pending, 0, __ATOMIC_ACQ_REL)) {
        if (g.app_cupti && (g.app_cupti() & GITM_APP_ENABLED)) {
            cuptiUnsubscribe(g.detach_sub); /* the job traces now: finalizing would end its trace */
        } else {
            cuptiFinalize(); /* drops every subscription, ours included */
            if (g.detach != DETACH_EVERY)
                g.detached = 1; /* never attached again by us: see the workflow, step 4 */
        }
        g.detach_subscribed = 0;
        __atomic_fetch_add(&g.ring.hdr->detaches, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&g.cupti_lock);
}

/* Called with cupti_lock held: the finalize is taken by the next driver API exit callback. */
static void arm_detach(void)
{
    g.detach_owed = 0;
    if (cuptiSubscribe(&g.detach_sub, detach_callback, NULL) != CUPTI_SUCCESS)
        return; /* someone else holds the subscriber slot: leave CUPTI attached */
    if (cuptiEnableDomain(1, g.detach_sub, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) {
        cuptiUnsubscribe(g.detach_sub);
        return;
    }
    g.detach_subscribed = 1;
    __atomic_store_n(&g.detach_pending, 1, __ATOMIC_RELEASE);
}

/* Called with cupti_lock held, when a window has closed (or a yield ended). */
static void request_detach(void)
{
    if (g.detach == DETACH_NEVER || g.detached || g.yield_share || app_holds_slot())
        return; /* a yield needs CUPTI attached: the detach comes when it ends */
    struct gitm_window_counts w = {
        .names_at_open = g.names_at_open,
        .names_at_close = __atomic_load_n(&g.ring.hdr->names_interned, __ATOMIC_RELAXED),
        .kernels_at_open = g.kernels_at_open,
        .kernels_at_close = __atomic_load_n(&g.kernels_seen, __ATOMIC_RELAXED),
    };
    g.closed_at_ns = mono_ns();
    if (gitm_may_detach(g.closed_at_ns - g.start_mono_ns, g.detach_min_age_ns, &w)) {
        arm_detach();
    } else {
        g.detach_owed = 1; /* still starting (detach_rule.h): the kinds are off; detach later */
    }
}

/* The control thread's hold on CUPTI: refused once the process exits (at_exit holds the lock while it
 * says so), so no CUPTI or CUDA call of ours runs while their libraries tear down. Seen on the H200
 * before this: a window closing while the job exited crashed in cuptiActivityDisable. */
static int lock_cupti(void)
{
    pthread_mutex_lock(&g.cupti_lock);
    if (!g.exiting)
        return 1;
    pthread_mutex_unlock(&g.cupti_lock);
    return 0;
}

/* The control thread, no window open: a detach a start-up window left owed is due once the process is
 * old enough and that window long enough closed -- not only at the next window, which can be minutes
 * away for a launch-bound job whose windows the daemon spaces out. */
static void owed_detach(void)
{
    if (!g.detach_owed || g.window_id)
        return;
    uint64_t now = mono_ns();
    if (!gitm_owed_detach_due(now - g.start_mono_ns, g.detach_min_age_ns, now - g.closed_at_ns))
        return;
    if (!lock_cupti())
        return;
    if (g.detach_owed && !g.window_id && g.detach != DETACH_NEVER && !g.detached && !g.yield_share &&
        !app_holds_slot() && !g.detach_subscribed)
        arm_detach();
    else
        g.detach_owed = 0;
    pthread_mutex_unlock(&g.cupti_lock);
}

/* Called with cupti_lock held: a detach asked for but not done yet is cancelled. */
static void cancel_detach(void)
{
    if (__atomic_exchange_n(&g.detach_pending, 0, __ATOMIC_ACQ_REL) || g.detach_subscribed) {
        cuptiUnsubscribe(g.detach_sub);
        g.detach_subscribed = 0;
    }
}

/* ---- streams: the CUstream behind a stream id ------------------------------------------------ *
 * Kernel records name streams by CUPTI's stream id; the stream-priority knob needs the handle. While
 * a window asks for GITM_KIND_STREAMS, launch API callbacks (runtime and driver) note each new
 * (context, handle) with its id, for the first LEARN_NS of the window only. Only CUPTI calls here.
 */
#define MAX_STREAMS 128
#define LEARN_NS (100 * 1000 * 1000ULL)

static struct known_stream {
    CUcontext ctx;
    CUstream handle;
    uint32_t id;
} streams[MAX_STREAMS];
static unsigned stream_count;
static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;

static void learn_stream(CUcontext ctx, CUstream h)
{
    if (!h || !ctx) /* the legacy default stream's priority cannot be changed */
        return;
    pthread_mutex_lock(&stream_lock);
    for (unsigned i = 0; i < stream_count; i++)
        if (streams[i].handle == h && streams[i].ctx == ctx) {
            pthread_mutex_unlock(&stream_lock);
            return;
        }
    uint32_t id = 0;
    if (stream_count < MAX_STREAMS && cuptiGetStreamIdEx(ctx, h, 0, &id) == CUPTI_SUCCESS)
        streams[stream_count++] = (struct known_stream){ctx, h, id};
    pthread_mutex_unlock(&stream_lock);
}

static void launch_seen(CUpti_CallbackDomain d, CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
    const void *a = cb->functionParams;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
            learn_stream(cb->context, (CUstream)((const cudaLaunchKernel_v7000_params *)a)->stream);
        else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000)
            learn_stream(cb->context, (CUstream)((const cudaLaunchKernel_ptsz_v7000_params *)a)->stream);
        return;
    }
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz)
        learn_stream(cb->context, ((const cuLaunchKernel_params *)a)->hStream);
    else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
        const CUlaunchConfig *cfg = ((const cuLaunchKernelEx_params *)a)->config;
        if (cfg)
            learn_stream(cb->context, cfg->hStream);
    }
}

/* ---- yielding the GPU (GITM_KNOB_YIELD) ---------------------------------------------------------- *
 * A background job's launching threads wait in the launch callback while the closed part of each
 * period runs; computed from the clock by the thread itself (no lock, no CUDA call). Kernels already
 * queued run on; only new work waits. Past yield_until_ns the gate is open whatever the daemon did.
 */
static void yield_gate(void)
{
    for (;;) {
        uint32_t share = __atomic_load_n(&g.yield_share, __ATOMIC_ACQUIRE);
        uint64_t now = mono_ns();
        if (!share || g.inert || now >= __atomic_load_n(&g.yield_until_ns, __ATOMIC_RELAXED))
            return;
        uint64_t period = __atomic_load_n(&g.yield_period_ns, __ATOMIC_RELAXED);
        uint64_t closed = period / 1000 * share, phase = period ? now % period : 0;
        if (!period || phase >= closed)
            return;
        uint64_t wait = closed - phase;
        struct timespec ts = {0, (long)(wait < 5000000 ? wait : 5000000)};
        nanosleep(&ts, NULL);
    }
}

static const struct {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
} LAUNCH_CBIDS[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz},
};

static int is_launch(CUpti_CallbackDomain d, CUpti_CallbackId cbid)
{
    for (size_t i = 0; i < sizeof LAUNCH_CBIDS / sizeof LAUNCH_CBIDS[0]; i++)
        if (LAUNCH_CBIDS[i].domain == d && LAUNCH_CBIDS[i].cbid == cbid)
            return 1;
    return 0;
}

/* ---- payload samples ------------------------------------------------------------------------- *
 * Small device-to-host copies (a loss that .item() reads each step, a checksum) are sampled while a
 * window is open, for the equivalence checks of experiments. A synchronous copy is read when its API
 * returns; an asynchronous one when a synchronization that covers its stream returns. The bytes are
 * read with process_vm_readv on ourselves: a destination that is not readable host memory (a device
 * pointer of a generic cuMemcpy, a buffer the program already unmapped) fails with EFAULT instead of
 * faulting the job. No CUDA call is made here.
 */

#define PAYLOAD_PENDING 64

static struct pending_copy {
    uint64_t dst;
    CUstream stream;
    uint32_t bytes;
    uint32_t correlation_id;
    uint8_t source;
} pending[PAYLOAD_PENDING];
static unsigned pending_count;

/* A record of an API callback, stamped now (CUPTI time); the caller fills the rest and publishes. */
static struct gitm_record *api_record(uint8_t type, uint8_t flags, uint32_t correlation_id, uint64_t *pos)
{
    uint64_t now = 0;
    cuptiGetTimestamp(&now);
    struct gitm_record *rec = reserve(pos);
    if (!rec)
        return NULL;
    rec->type = type;
    rec->flags = flags;
    rec->correlation_id = correlation_id;
    rec->start_ns = now;
    return rec;
}

static void emit_payload(uint64_t dst, uint32_t n, uint32_t correlation_id, uint8_t source)
{
    uint8_t data[GITM_PAYLOAD_BYTES];
    struct iovec local = {data, n}, remote = {(void *)(uintptr_t)dst, n};
    if (n == 0 || n > sizeof data || process_vm_readv(g.pid, &local, 1, &remote, 1, 0) != (ssize_t)n)
        return;
    uint64_t pos;
    struct gitm_record *rec = api_record(GITM_REC_PAYLOAD, (uint8_t)n, correlation_id, &pos);
    if (!rec)
        return;
    rec->device = source;
    memcpy(((struct gitm_payload_payload *)rec->payload)->data, data, n);
    publish(rec, pos);
}

static void remember(uint64_t dst, size_t bytes, CUstream stream, uint32_t correlation_id, uint8_t source)
{
    if (bytes == 0 || bytes > GITM_PAYLOAD_BYTES)
        return;
    pthread_mutex_lock(&g.payload_lock);
    if (pending_count == PAYLOAD_PENDING) { /* never synchronized: the oldest goes */
        memmove(pending, pending + 1, sizeof pending[0] * (PAYLOAD_PENDING - 1));
        pending_count--;
    }
    pending[pending_count++] = (struct pending_copy){dst, stream, (uint32_t)bytes, correlation_id, source};
    pthread_mutex_unlock(&g.payload_lock);
}

/* A synchronization returned: the copies it covers are complete. all: the whole context. */
static void synchronized(CUstream stream, int all)
{
    pthread_mutex_lock(&g.payload_lock);
    unsigned kept = 0;
    for (unsigned i = 0; i < pending_count; i++) {
        struct pending_copy p = pending[i];
        if (all || p.stream == stream || p.stream == NULL)
            emit_payload(p.dst, p.bytes, p.correlation_id, p.source);
        else
            pending[kept++] = p;
    }
    pending_count = kept;
    pthread_mutex_unlock(&g.payload_lock);
}

/* ---- hot host sources ------------------------------------------------------------------------ *
 * The host address of each host-to-device copy of GITM_HOSTSRC_MIN_BYTES or more, so the daemon can
 * tell which pageable buffers are copied every step (the MEMCPY activity record says PAGEABLE and the
 * size, not the address; both carry the API's correlation id). An asynchronous copy is reported when
 * the same thread's next copy or synchronization call is seen: SYNCED when that call was a sync
 * covering the copy's stream, i.e. the host waited for it before going on. Only those buffers (and
 * the ones of synchronous copies) may be page-locked behind the program's back: page-locked, an
 * asynchronous copy really is asynchronous, and a host that rewrote the buffer before waiting would
 * change what the device reads.
 */

static __thread struct tl_copy {
    uint64_t src, dst, bytes;
    CUstream stream;
    uint32_t corr, cbid, window;
    uint8_t flags;
} tl_copy;

static void emit_hostsrc(const struct tl_copy *c, uint8_t flags)
{
    uint64_t pos;
    struct gitm_record *rec = api_record(GITM_REC_HOSTSRC, flags, c->corr, &pos);
    if (!rec)
        return;
    struct gitm_hostsrc_payload *p = (struct gitm_hostsrc_payload *)rec->payload;
    p->src = c->src;
    p->dst = c->dst;
    p->bytes = c->bytes;
    p->cbid = c->cbid;
    publish(rec, pos);
}

/* the thread's pending asynchronous copy, reported now: SYNCED if `covered` */
static void settle_copy(int covered)
{
    if (!tl_copy.corr)
        return;
    if (tl_copy.window == g.window_id)
        emit_hostsrc(&tl_copy, (uint8_t)(tl_copy.flags | (covered ? GITM_HOSTSRC_SYNCED : 0)));
    tl_copy.corr = 0;
}

static void hostsrc_seen(CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
    const void *a = cb->functionParams;
    struct tl_copy c = {.corr = cb->correlationId, .cbid = (uint32_t)cbid, .window = g.window_id};
    int async = 0;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds: {
        const cuMemcpyHtoD_v2_params *p = a;
        c.src = (uint64_t)(uintptr_t)p->srcHost, c.dst = p->dstDevice, c.bytes = p->ByteCount;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
        const cuMemcpyHtoDAsync_v2_params *p = a;
        c.src = (uint64_t)(uintptr_t)p->srcHost, c.dst = p->dstDevice, c.bytes = p->ByteCount;
        c.stream = p->hStream;
        async = 1;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds: {
        const cuMemcpy_params *p = a;
        c.src = p->src, c.dst = p->dst, c.bytes = p->ByteCount, c.flags = GITM_HOSTSRC_GENERIC;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: {
        const cuMemcpyAsync_params *p = a;
        c.src = p->src, c.dst = p->dst, c.bytes = p->ByteCount, c.flags = GITM_HOSTSRC_GENERIC;
        c.stream = p->hStream;
        async = 1;
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz: {
        CUstream h = ((const cuStreamSynchronize_params *)a)->hStream;
        if (tl_copy.corr)
            settle_copy(h == tl_copy.stream);
        return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
        if (tl_copy.corr)
            settle_copy(1);
        return;
    default:
        return;
    }
    if (tl_copy.corr) /* another copy before a sync: the earlier one was not waited for */
        settle_copy(0);
    if (c.bytes < GITM_HOSTSRC_MIN_BYTES)
        return;
    __atomic_store_n(&g.copy_ctx, cb->context, __ATOMIC_RELAXED);
    if (async)
        tl_copy = c;
    else
        emit_hostsrc(&c, (uint8_t)(c.flags | GITM_HOSTSRC_SYNC_API));
}

/* ---- the host's waits, timed from the sync calls' callbacks (GITM_KIND_SYNC) -------------------- */

static __thread uint64_t sync_enter_ns; /* this thread's sync call: CUPTI's clock at its entry */
static __thread uint32_t sync_enter_corr; /* and its correlation id: an EXIT pairs with its own ENTER */

static int sync_type_of(CUpti_CallbackId cbid)
{
    switch (cbid) { /* CUpti_ActivitySynchronizationType, as SYNCHRONIZATION records name them */
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
        return CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE;
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
        return CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
#if CUDA_VERSION >= 13000
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2: /* cudaDeviceSynchronize's, from CUDA 13 on */
#endif
        return CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
    default:
        return 0;
    }
}

/* At the EXIT of a sync call whose ENTER this thread timed: one GITM_REC_SYNC record, as the
 * SYNCHRONIZATION activity would have written it (flags bit 1: timed by the host's callbacks). */
static void sync_seen(CUpti_CallbackId cbid, const CUpti_CallbackData *cb, int type)
{
    uint64_t start = sync_enter_ns, end = 0;
    sync_enter_ns = 0;
    if (!start || sync_enter_corr != cb->correlationId || cuptiGetTimestamp(&end) != CUPTI_SUCCESS || end < start)
        return;
    uint32_t stream_id = 0;
    if (type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) {
        CUstream h = ((const cuStreamSynchronize_params *)cb->functionParams)->hStream;
        uint8_t per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz;
        if (cuptiGetStreamIdEx(cb->context, h, per_thread, &stream_id) != CUPTI_SUCCESS)
            stream_id = 0;
    }
    uint64_t pos;
    struct gitm_record *rec = reserve(&pos);
    if (!rec)
        return;
    rec->type = GITM_REC_SYNC;
    rec->flags = GITM_SYNC_FLAG_CALLBACK;
    rec->correlation_id = cb->correlationId;
    rec->start_ns = start;
    rec->end_ns = end;
    struct gitm_sync_payload *p = (void *)rec->payload;
    p->sync_type = (uint32_t)type;
    p->stream_id = stream_id;
    p->context_id = cb->contextUid;
    p->event_id = 0;
    publish(rec, pos);
}

static void CUPTIAPI payload_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId cbid, const void *info)
{
    (void)u;
    const CUpti_CallbackData *cb = info;
    int sync = d == CUPTI_CB_DOMAIN_DRIVER_API && __atomic_load_n(&g.sync_on, __ATOMIC_RELAXED) ? sync_type_of(cbid) : 0;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (sync) {
            sync_enter_corr = cb->correlationId;
            if (cuptiGetTimestamp(&sync_enter_ns) != CUPTI_SUCCESS)
                sync_enter_ns = 0;
        }
        if (__atomic_load_n(&g.yield_share, __ATOMIC_RELAXED) && is_launch(d, cbid))
            yield_gate();
        if (__atomic_load_n(&g.learning, __ATOMIC_RELAXED))
            launch_seen(d, cbid, cb);
        return;
    }
    if (d != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_EXIT)
        return;
    if (sync && g.window_id)
        sync_seen(cbid, cb, sync);
    else if (sync_type_of(cbid))
        sync_enter_ns = 0; /* a wait that outlived its window: never paired with a later call */
    if (!g.window_id)
        return;
    const void *a = cb->functionParams;
    uint32_t corr = cb->correlationId;
    if (__atomic_load_n(&g.hostsrc_on, __ATOMIC_RELAXED))
        hostsrc_seen(cbid, cb);
    if (!__atomic_load_n(&g.payload_on, __ATOMIC_RELAXED))
        return;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: {
        const cuMemcpyDtoH_v2_params *p = a;
        if (p->ByteCount <= GITM_PAYLOAD_BYTES)
            emit_payload((uint64_t)(uintptr_t)p->dstHost, (uint32_t)p->ByteCount, corr, GITM_PAYLOAD_SYNC_COPY);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds: {
        const cuMemcpy_params *p = a;
        if (p->ByteCount <= GITM_PAYLOAD_BYTES)
            emit_payload(p->dst, (uint32_t)p->ByteCount, corr, GITM_PAYLOAD_GENERIC_COPY);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
        const cuMemcpyDtoHAsync_v2_params *p = a;
        remember((uint64_t)(uintptr_t)p->dstHost, p->ByteCount, p->hStream, corr, GITM_PAYLOAD_ASYNC_COPY);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: {
        const cuMemcpyAsync_params *p = a;
        remember(p->dst, p->ByteCount, p->hStream, corr, GITM_PAYLOAD_GENERIC_COPY);
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
        synchronized(((const cuStreamSynchronize_params *)a)->hStream, 0);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
#if CUDA_VERSION >= 13000
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
#endif
        synchronized(NULL, 1);
        break;
    default:
        break;
    }
}

static const CUpti_CallbackId PAYLOAD_CBIDS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,          CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy,                 CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,     CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,            CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
#if CUDA_VERSION >= 13000
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
#endif
};

static const CUpti_CallbackId HOSTSRC_CBIDS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,          CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,     CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy,                 CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,            CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,      CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
#if CUDA_VERSION >= 13000
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
#endif
};

static const CUpti_CallbackId SYNC_CBIDS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,    CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
#if CUDA_VERSION >= 13000
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2, /* cudaDeviceSynchronize (CUDA 13: a sync test saw no record without it) */
#endif
};

static int enable_cbids(const CUpti_CallbackId *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cuptiEnableCallback(1, g.payload_sub, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]) != CUPTI_SUCCESS)
            return 0;
    return 1;
}

static void disable_cbids(const CUpti_CallbackId *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cuptiEnableCallback(0, g.payload_sub, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
}

/* launch callbacks are on while streams are learnt or the process yields */
static void enable_learning(int on)
{
    __atomic_store_n(&g.learning, on, __ATOMIC_RELAXED);
    int want = on || __atomic_load_n(&g.yield_share, __ATOMIC_RELAXED);
    for (size_t i = 0; i < sizeof LAUNCH_CBIDS / sizeof LAUNCH_CBIDS[0]; i++)
        cuptiEnableCallback(want, g.payload_sub, LAUNCH_CBIDS[i].domain, LAUNCH_CBIDS[i].cbid);
}

/* Called with cupti_lock held, at window open: one subscriber for payload samples and stream
 * learning. Failing leaves the window without either. */
static uint32_t start_payloads(uint32_t mask)
{
    if (!(mask & (GITM_KIND_PAYLOAD | GITM_KIND_STREAMS | GITM_KIND_HOSTSRC | GITM_KIND_SYNC)))
        return 0;
    if (!g.payload_subscribed) { /* a yield may hold it already */
        if (app_holds_slot() || cuptiSubscribe(&g.payload_sub, payload_callback, NULL) != CUPTI_SUCCESS)
            return 0;
        g.payload_subscribed = 1;
    }
    uint32_t got = 0;
    if ((mask & GITM_KIND_PAYLOAD) && enable_cbids(PAYLOAD_CBIDS, sizeof PAYLOAD_CBIDS / sizeof PAYLOAD_CBIDS[0])) {
        got |= GITM_KIND_PAYLOAD;
        __atomic_store_n(&g.payload_on, 1, __ATOMIC_RELAXED);
    }
    if ((mask & GITM_KIND_HOSTSRC) && enable_cbids(HOSTSRC_CBIDS, sizeof HOSTSRC_CBIDS / sizeof HOSTSRC_CBIDS[0])) {
        got |= GITM_KIND_HOSTSRC;
        __atomic_store_n(&g.hostsrc_on, 1, __ATOMIC_RELAXED);
    }
    if ((mask & GITM_KIND_SYNC) && enable_cbids(SYNC_CBIDS, sizeof SYNC_CBIDS / sizeof SYNC_CBIDS[0])) {
        got |= GITM_KIND_SYNC;
        __atomic_store_n(&g.sync_on, 1, __ATOMIC_RELAXED);
    }
    if (mask & GITM_KIND_STREAMS) {
        enable_learning(1);
        g.learn_until_ns = mono_ns() + LEARN_NS;
        got |= GITM_KIND_STREAMS;
    }
    if (!got && !g.yield_share) {
        cuptiUnsubscribe(g.payload_sub);
        g.payload_subscribed = 0;
    }
    return got;
}

/* Called with cupti_lock held, at window close: the subscriber slot is free again after it. */
static void stop_payloads(void)
{
    if (!g.payload_subscribed)
        return;
    __atomic_store_n(&g.learning, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g.payload_on, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g.hostsrc_on, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g.sync_on, 0, __ATOMIC_RELAXED);
    if (g.yield_share) { /* the yield keeps the subscriber and its launch callbacks */
        disable_cbids(PAYLOAD_CBIDS, sizeof PAYLOAD_CBIDS / sizeof PAYLOAD_CBIDS[0]);
        disable_cbids(HOSTSRC_CBIDS, sizeof HOSTSRC_CBIDS / sizeof HOSTSRC_CBIDS[0]);
        disable_cbids(SYNC_CBIDS, sizeof SYNC_CBIDS / sizeof SYNC_CBIDS[0]);
    } else {
        cuptiUnsubscribe(g.payload_sub);
        g.payload_subscribed = 0;
    }
    pthread_mutex_lock(&g.payload_lock);
    pending_count = 0; /* copies never synchronized inside the window are not sampled */
    pthread_mutex_unlock(&g.payload_lock);
}

/* ---- windows ---------------------------------------------------------------------------------- */

/* The activity kinds a window may ask. GITM_KIND_SYNC is not one of them: SYNCHRONIZATION activity,
 * once enabled, leaves every later launch slower after it is disabled again (+15% on a launch-bound
 * training step, +19% on a launch loop, for the rest of the process; H200 2026-12-04,
 * bench/cupti_residual.py), and CUPTI stays attached for the rest of the run (step 4 above). The
 * host's waits are timed from the sync calls' own callbacks instead (sync_seen), which leave
 * nothing behind once unsubscribed. */
static const struct {
    uint32_t gitm;
    CUpti_ActivityKind cupti;
} KINDS[] = {
    {GITM_KIND_KERNEL, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
    {GITM_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY},
    {GITM_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMSET},
    {GITM_KIND_MEMORY, CUPTI_ACTIVITY_KIND_MEMORY2},
};

static void CUPTIAPI probe_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *i)
{
    (void)u;
    (void)d;
    (void)c;
    (void)i;
}

/* Another CUPTI user (torch.profiler, nsys...) holds the one subscriber slot: step aside. */
static int other_subscriber_present(void)
{
    CUpti_SubscriberHandle sub;
    CUptiResult r = cuptiSubscribe(&sub, probe_callback, NULL);
    if (r == CUPTI_SUCCESS) {
        cuptiUnsubscribe(sub);
        return 0;
    }
    return r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? 1 : -(int)r;
}

static void collect_cupti_drops(void)
{
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped) {
        __atomic_fetch_add(&g.ring.hdr->cupti_drops, dropped, __ATOMIC_RELAXED);
        DEBUG("CUPTI dropped %zu records", dropped);
    }
}

static void close_window(const char *why)
{
    uint64_t t0 = mono_ns();
    __atomic_store_n(&g.sync_on, 0, __ATOMIC_RELAXED); /* no sync record after the close marker */
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (g.enabled_mask & KINDS[i].gitm)
            cuptiActivityDisable(KINDS[i].cupti);
    CUptiResult flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    DEBUG("window %u: kinds off and forced flush (%d) in %.1f ms, %llu kernels seen", g.window_id, (int)flushed,
          DEBUG_MS(t0), (unsigned long long)__atomic_load_n(&g.kernels_seen, __ATOMIC_RELAXED));
    collect_cupti_drops();
    write_clock_pair();
    write_window_marker(g.window_id, 2, g.enabled_mask);
    stop_payloads();
    g.enabled_mask = 0;
    g.window_id = 0;
    g.ring.hdr->window_id = 0;
    gitm_ring_set_status(&g.ring, GITM_STATUS_IDLE, 0, why);
    DEBUG("window closed in %.1f ms (%s)", DEBUG_MS(t0), why);
    if (g.detach == DETACH_EVERY)
        request_detach();
}

/* The job's own profiler enabled CUPTI activity while a window was open (the guard saw it and has
 * put the job's buffer callbacks back): give the window up without touching what the job uses — no
 * flush (the buffers now go to the job), no detach; only the kinds the job did not enable are
 * turned off again. Called with cupti_lock held. */
static void abandon_window(void)
{
    uint64_t theirs = g.app_kinds ? g.app_kinds() : 0;
    __atomic_store_n(&g.sync_on, 0, __ATOMIC_RELAXED);
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        if ((g.enabled_mask & KINDS[i].gitm) && !((unsigned)KINDS[i].cupti < 64 && (theirs >> KINDS[i].cupti) & 1))
            cuptiActivityDisable(KINDS[i].cupti);
    write_window_marker(g.window_id, 2, g.enabled_mask);
    stop_payloads();
    g.enabled_mask = 0;
    g.window_id = 0;
    g.ring.hdr->window_id = 0;
    gitm_ring_set_status(&g.ring, GITM_STATUS_STEPPED_ASIDE, 0,
                         "the job's own profiler started tracing (CUPTI): window given up, its trace kept");
}

/* In the job's thread: its cuptiSubscribe found the slot taken (the guard retries it if we let go).
 * Kineto fails its whole CUDA trace without the slot, so the shim gives up what it holds the slot
 * for: a detach waiting for the next driver call, payload samples, stream learning, a yield. */
static int give_up_slot(void)
{
    pthread_mutex_lock(&g.cupti_lock);
    int had = __atomic_load_n(&g.detach_pending, __ATOMIC_ACQUIRE) || g.detach_subscribed || g.payload_subscribed;
    cancel_detach();
    __atomic_store_n(&g.yield_share, 0, __ATOMIC_RELEASE); /* no yield: stop_payloads lets the slot go */
    stop_payloads();
    if (had && !g.window_id)
        gitm_ring_set_status(&g.ring, GITM_STATUS_STEPPED_ASIDE, 0,
                             "the job's own profiler took CUPTI's subscriber: no payload samples, stream learning or yield while it holds it");
    pthread_mutex_unlock(&g.cupti_lock);
    return had;
}

static void app_cupti_used(void)
{
    __atomic_store_n(&g.app_acted, 1, __ATOMIC_RELEASE); /* in the job's thread: no CUPTI call here */
}

static void open_window(uint32_t id, uint32_t mask)
{
    uint64_t t0 = mono_ns();
    if (g.detached || g.detach_requested) {
        gitm_ring_set_status(&g.ring, GITM_STATUS_IDLE, 0,
                             "CUPTI detached (or about to be) for good: no more windows in this process");
        return;
    }
    cancel_detach();
    g.detach_owed = 0; /* this window's close decides anew (legacy mode; none owed otherwise) */
    if (g.app_cupti && (g.app_cupti() & GITM_APP_ENABLED)) {
        gitm_ring_set_status(&g.ring, GITM_STATUS_STEPPED_ASIDE, 0,
                             "the job's own profiler is tracing (CUPTI activity enabled by the job): not capturing");
        return;
    }
    __atomic_store_n(&g.app_acted, 0, __ATOMIC_RELEASE);
    /* a yield of ours may hold the slot; the job's profiler holding it without tracing is no reason
     * to stay out (the guard tells us when it starts tracing) */
    int other = g.payload_subscribed || app_holds_slot() ? 0 : other_subscriber_present();
    if (other != 0) {
        gitm_ring_set_status(&g.ring, GITM_STATUS_STEPPED_ASIDE, other > 0 ? CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED : -other,
                             other > 0 ? "another CUPTI subscriber (a profiler) is active: not capturing"
                                       : "cuptiSubscribe failed: not capturing");
        return;
    }
    /* Someone (a profiler that has since finished) may have replaced our buffer callbacks. */
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        switch_off(r, "cuptiActivityRegisterCallbacks");
        return;
    }
    DEBUG("window %u: subscriber probe and callbacks %.1f ms", id, DEBUG_MS(t0));
    write_clock_pair();
    write_window_marker(id, 1, mask);
    uint32_t enabled = 0;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        if (!(mask & KINDS[i].gitm))
            continue;
        r = cuptiActivityEnable(KINDS[i].cupti);
        if (r == CUPTI_SUCCESS)
            enabled |= KINDS[i].gitm;
        else
            DEBUG("window %u: cuptiActivityEnable(%d) failed: %d", id, (int)KINDS[i].cupti, (int)r);
    }
    DEBUG("window %u: activity kinds enabled at %.1f ms", id, DEBUG_MS(t0));
    enabled |= start_payloads(mask);
    DEBUG("window %u: open in %.1f ms (kinds 0x%x)", id, DEBUG_MS(t0), enabled);
    g.enabled_mask = enabled;
    g.names_at_open = __atomic_load_n(&g.ring.hdr->names_interned, __ATOMIC_RELAXED);
    g.kernels_at_open = __atomic_load_n(&g.kernels_seen, __ATOMIC_RELAXED);
    g.window_id = id;
    g.ring.hdr->window_id = id;
    g.last_flush_ns = mono_ns();
    __atomic_fetch_add(&g.ring.hdr->windows_opened, 1, __ATOMIC_RELAXED);
    gitm_ring_set_status(&g.ring, GITM_STATUS_CAPTURING, 0, "window open");
}

/* ---- knobs: CUDA calls from the control thread only (never inside a callback) ------------------ */

static void *cuda_fn(const char *name)
{
    /* libcuda is loaded (it loaded us), but often RTLD_LOCAL (by libcudart): ask it by handle */
    static void *lib;
    if (!lib)
        lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? dlsym(lib, name) : NULL;
}

typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);

static int32_t knob_stream_priority(const uint64_t *args, uint64_t *out)
{
    CUresult (*get_prio)(CUstream, int *) = (CUresult(*)(CUstream, int *))cuda_fn("cuStreamGetPriority");
    CUresult (*set_attr)(CUstream, CUstreamAttrID, const CUstreamAttrValue *) =
        (CUresult(*)(CUstream, CUstreamAttrID, const CUstreamAttrValue *))cuda_fn("cuStreamSetAttribute");
    ctx_push_fn push = (ctx_push_fn)cuda_fn("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)cuda_fn("cuCtxPopCurrent_v2");
    if (!get_prio || !set_attr || !push || !pop)
        return -ELIBACC;
    int64_t want = (int64_t)args[1];
    if (want < -64 || want > 64)
        return -EINVAL;
    struct known_stream ks = {0};
    int found = 0;
    pthread_mutex_lock(&stream_lock);
    for (unsigned i = 0; i < stream_count; i++)
        if (streams[i].id == (uint32_t)args[0]) {
            ks = streams[i];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&stream_lock);
    if (!found)
        return -ENOENT;
    /* cuptiGetStreamIdEx must not run while a job thread finalizes CUPTI (a detach pending after a
     * window): with cupti_lock held, the detach callback's trylock fails, in this thread and in the
     * job's, and the detach waits for the next API exit. */
    pthread_mutex_lock(&g.cupti_lock);
    if (g.detached || __atomic_load_n(&g.detach_pending, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&g.cupti_lock);
        return -ESHUTDOWN; /* the handle is checked through CUPTI, never attached again */
    }
    if (push(ks.ctx) != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g.cupti_lock);
        return -ESTALE;
    }
    int32_t rc = 0;
    uint32_t id = 0;
    int before = 0, after = 0;
    CUresult r;
    if (cuptiGetStreamIdEx(ks.ctx, ks.handle, 0, &id) != CUPTI_SUCCESS || id != ks.id) {
        rc = -ESTALE;
    } else if ((r = get_prio(ks.handle, &before)) != CUDA_SUCCESS) {
        out[2] = (uint64_t)r;
        rc = -EIO;
    } else {
        if (!args[2]) {
            CUstreamAttrValue v;
            memset(&v, 0, sizeof v);
            v.priority = (int)want;
            if ((r = set_attr(ks.handle, CU_STREAM_ATTRIBUTE_PRIORITY, &v)) != CUDA_SUCCESS) {
                out[2] = (uint64_t)r;
                rc = -EIO;
            }
        }
        if (rc == 0 && (r = get_prio(ks.handle, &after)) != CUDA_SUCCESS) {
            out[2] = (uint64_t)r;
            rc = -EIO;
        }
        out[0] = (uint64_t)(int64_t)before;
        out[1] = (uint64_t)(int64_t)after;
    }
    CUcontext popped;
    pop(&popped);
    pthread_mutex_unlock(&g.cupti_lock);
    return rc;
}

static int32_t knob_mempool_release(const uint64_t *args, uint64_t *out)
{
    CUresult (*get_pool)(CUmemoryPool *, CUdevice) =
        (CUresult(*)(CUmemoryPool *, CUdevice))cuda_fn("cuDeviceGetDefaultMemPool");
    CUresult (*get_attr)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))cuda_fn("cuMemPoolGetAttribute");
    CUresult (*set_attr)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))cuda_fn("cuMemPoolSetAttribute");
    if (!get_pool || !get_attr || !set_attr)
        return -ELIBACC;
    CUmemoryPool pool;
    CUresult r = get_pool(&pool, (CUdevice)args[0]);
    cuuint64_t before = 0, after = 0, want = (cuuint64_t)args[1];
    if (r == CUDA_SUCCESS)
        r = get_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &before);
    if (r == CUDA_SUCCESS && !args[2])
        r = set_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &want);
    if (r == CUDA_SUCCESS)
        r = get_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &after);
    out[0] = before;
    out[1] = after;
    out[2] = (uint64_t)r;
    return r == CUDA_SUCCESS ? 0 : (r == CUDA_ERROR_INVALID_DEVICE ? -ENODEV : -EIO);
}

/* The scheduling flag of the device's primary context (how its synchronizations wait): read, or
 * set through cuCtxSetFlags with the context pushed on this thread. A device whose primary context
 * is not active is left alone (retaining it would create a context the job never asked for). */
static int32_t knob_ctx_sched(const uint64_t *args, uint64_t *out)
{
    CUresult (*state)(CUdevice, unsigned int *, int *) =
        (CUresult(*)(CUdevice, unsigned int *, int *))cuda_fn("cuDevicePrimaryCtxGetState");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))cuda_fn("cuDevicePrimaryCtxRetain");
    CUresult (*release)(CUdevice) = (CUresult(*)(CUdevice))cuda_fn("cuDevicePrimaryCtxRelease_v2");
    CUresult (*get_flags)(unsigned int *) = (CUresult(*)(unsigned int *))cuda_fn("cuCtxGetFlags");
    CUresult (*set_flags)(unsigned int) = (CUresult(*)(unsigned int))cuda_fn("cuCtxSetFlags");
    ctx_push_fn push = (ctx_push_fn)cuda_fn("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)cuda_fn("cuCtxPopCurrent_v2");
    uint64_t want = args[1];
    int query = args[2] == 1;
    if (!query && want != CU_CTX_SCHED_AUTO && want != CU_CTX_SCHED_SPIN && want != CU_CTX_SCHED_YIELD &&
        want != CU_CTX_SCHED_BLOCKING_SYNC)
        return -EINVAL;
    if (!state || !retain || !release || !get_flags || !push || !pop)
        return -ELIBACC;
    if (!query && !set_flags)
        return -ENOTSUP;
    unsigned int primary_flags = 0, before = 0, after = 0;
    int active = 0;
    CUresult r = state((CUdevice)args[0], &primary_flags, &active);
    if (r != CUDA_SUCCESS) {
        out[2] = (uint64_t)r;
        return r == CUDA_ERROR_INVALID_DEVICE ? -ENODEV : -EIO;
    }
    if (!active)
        return -ESRCH;
    CUcontext ctx = NULL, popped = NULL;
    r = retain(&ctx, (CUdevice)args[0]);
    if (r == CUDA_SUCCESS) {
        r = push(ctx);
        if (r == CUDA_SUCCESS) {
            r = get_flags(&before);
            if (r == CUDA_SUCCESS && !query)
                r = set_flags((before & ~(unsigned int)CU_CTX_SCHED_MASK) | (unsigned int)want);
            if (r == CUDA_SUCCESS)
                r = get_flags(&after);
            pop(&popped);
        }
        release((CUdevice)args[0]);
    }
    out[0] = before & CU_CTX_SCHED_MASK;
    out[1] = after & CU_CTX_SCHED_MASK;
    out[2] = (uint64_t)r;
    return r == CUDA_SUCCESS ? 0 : -EIO;
}

/* Called by libgitm_guard.so (any thread, its lock held) before the program releases a registered
 * range, and by the unregister knob. Not in a forked child (CUDA is unusable there) nor after exit
 * began (the driver may be tearing down; the kernel unpins at exit). */
static int release_host(uint64_t base)
{
    if (g.exiting || getpid() != g.pid)
        return 0;
    CUresult (*unreg)(void *) = (CUresult(*)(void *))cuda_fn("cuMemHostUnregister");
    ctx_push_fn push = (ctx_push_fn)cuda_fn("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)cuda_fn("cuCtxPopCurrent_v2");
    CUcontext ctx = __atomic_load_n(&g.copy_ctx, __ATOMIC_RELAXED);
    if (!unreg || !push || !pop || !ctx || push(ctx) != CUDA_SUCCESS)
        return -1;
    CUresult r = unreg((void *)(uintptr_t)base);
    CUcontext popped;
    pop(&popped);
    return r == CUDA_SUCCESS ? 0 : -1;
}

/* [addr, addr + len) inside private, anonymous, read-write mappings that follow one another without
 * a hole (malloc's heap or arenas, an mmap'd chunk that madvise split into several VMAs): not a file,
 * not a stack, not device or shared memory. */
static int private_anonymous(uint64_t addr, uint64_t len)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;
    char line[512];
    uint64_t covered = 0; /* the range is good up to here */
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, off, inode;
        char perms[8], dev[16];
        int n = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %n", &lo, &hi, perms, &off, dev, &inode, &n) < 6)
            continue;
        if (!covered && (addr < lo || addr >= hi))
            continue;
        if (covered && lo != covered)
            break; /* a hole */
        const char *path = line + n;
        path += strspn(path, " ");
        int named = *path && *path != '\n';
        if (strncmp(perms, "rw-p", 4) != 0 || inode != 0 || (named && strncmp(path, "[heap]", 6) != 0))
            break;
        covered = hi;
        if (addr + len <= covered) {
            ok = 1;
            break;
        }
    }
    fclose(f);
    return ok;
}

static int32_t knob_host_register(const uint64_t *args, uint64_t *out)
{
    int (*add)(uint64_t, uint64_t, gitm_guard_release_fn) =
        (int (*)(uint64_t, uint64_t, gitm_guard_release_fn))dlsym(RTLD_DEFAULT, "gitm_guard_add");
    int (*remove)(uint64_t, int) = (int (*)(uint64_t, int))dlsym(RTLD_DEFAULT, "gitm_guard_remove");
    int (*holds)(uint64_t) = (int (*)(uint64_t))dlsym(RTLD_DEFAULT, "gitm_guard_holds");
    uint64_t (*released)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_released");
    uint64_t addr = args[0], len = args[1], op = args[2];
    if (!add || !remove || !holds || !released) {
        out[0] = 0;
        return op == 2 ? 0 : -ENOTSUP; /* nothing can be registered: nothing is */
    }
    if (op == 2 || op == 1) {
        int found = op == 1 ? remove(addr, 1) : 1;
        out[0] = (uint64_t)holds(addr);
        out[1] = released();
        return found ? 0 : -ENOENT;
    }
    if (op != 0 || !addr || !len || addr + len < addr)
        return -EINVAL;
    if (holds(addr)) {
        out[0] = 1;
        out[1] = released();
        return 0;
    }
    if (!private_anonymous(addr, len))
        return -EFAULT;
    CUresult (*reg)(void *, size_t, unsigned) = (CUresult(*)(void *, size_t, unsigned))cuda_fn("cuMemHostRegister_v2");
    ctx_push_fn push = (ctx_push_fn)cuda_fn("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)cuda_fn("cuCtxPopCurrent_v2");
    if (!reg || !push || !pop)
        return -ELIBACC;
    CUcontext ctx = __atomic_load_n(&g.copy_ctx, __ATOMIC_RELAXED);
    if (!ctx)
        return -EBUSY;
    /* guarded first: a free racing with the registration releases it (an unregister of a range not
     * registered yet fails harmlessly), and the check below sees it gone */
    int rc = add(addr, len, release_host);
    if (rc != 0)
        return rc;
    if (push(ctx) != CUDA_SUCCESS) {
        remove(addr, 0);
        return -ESTALE;
    }
    CUresult r = reg((void *)(uintptr_t)addr, (size_t)len, CU_MEMHOSTREGISTER_PORTABLE);
    CUcontext popped;
    pop(&popped);
    if (r != CUDA_SUCCESS) {
        remove(addr, 0);
        out[2] = (uint64_t)r;
        return -EIO;
    }
    if (!holds(addr)) { /* the program released it meanwhile */
        release_host(addr);
        out[1] = released();
        return -ENOENT;
    }
    /* page-locked ranges may be excluded from fork (MADV_DONTFORK): a forked child that reads its
     * copy of the buffer must still find it (the kernel copies pinned pages at fork) */
    syscall(SYS_madvise, (void *)(uintptr_t)(addr & ~(uint64_t)4095), (size_t)(len + (addr & 4095)), MADV_DOFORK);
    out[0] = 1;
    out[1] = released();
    return 0;
}

/* Called with cupti_lock held: the yield off, the subscriber given back if no window uses it. */
static void yield_off(void)
{
    if (!g.yield_share)
        return;
    __atomic_store_n(&g.yield_share, 0, __ATOMIC_RELEASE);
    if (g.payload_subscribed && !g.window_id) {
        cuptiUnsubscribe(g.payload_sub);
        g.payload_subscribed = 0;
        if (g.detach == DETACH_EVERY)
            request_detach();
    } else if (g.payload_subscribed) {
        enable_learning(__atomic_load_n(&g.learning, __ATOMIC_RELAXED));
    }
}

static int32_t knob_yield(const uint64_t *args, uint64_t *out)
{
    uint64_t now = mono_ns();
    out[0] = g.yield_share;
    if (args[3] == 1) {
        out[1] = g.yield_share;
        out[2] = g.yield_share && g.yield_until_ns > now ? (g.yield_until_ns - now) / 1000000 : 0;
        return 0;
    }
    uint64_t share = args[0], period_ms = args[1] ? args[1] : 100, expiry_s = args[2];
    if (share > 950 || period_ms < 10 || period_ms > 1000 || (share && (expiry_s < 1 || expiry_s > 600)))
        return -EINVAL;
    pthread_mutex_lock(&g.cupti_lock);
    int32_t rc = 0;
    if (!share) {
        yield_off();
    } else if (g.detached || __atomic_load_n(&g.detach_pending, __ATOMIC_ACQUIRE)) {
        rc = -ESHUTDOWN; /* a yield needs CUPTI's callbacks, and CUPTI is never attached again */
    } else {
        cancel_detach();
        if (!g.payload_subscribed) {
            if (app_holds_slot() || cuptiSubscribe(&g.payload_sub, payload_callback, NULL) != CUPTI_SUCCESS) {
                rc = -EBUSY;
                goto out;
            }
            g.payload_subscribed = 1;
        }
        __atomic_store_n(&g.yield_period_ns, period_ms * 1000000ULL, __ATOMIC_RELAXED);
        __atomic_store_n(&g.yield_until_ns, now + expiry_s * 1000000000ULL, __ATOMIC_RELAXED);
        __atomic_store_n(&g.yield_share, (uint32_t)share, __ATOMIC_RELEASE);
        enable_learning(__atomic_load_n(&g.learning, __ATOMIC_RELAXED));
    }
out:
    out[1] = g.yield_share;
    out[2] = g.yield_share ? (g.yield_until_ns - now) / 1000000 : 0;
    pthread_mutex_unlock(&g.cupti_lock);
    return rc;
}

/* GITM_KNOB_DETACH: the daemon has seen enough of this process. out[0]: 1 the finalize is armed
 * (made at the next driver API exit) or made, 2 owed (the process is still starting: made once it is
 * settled, detach_rule.h), 0 never (GITM_SHIM_DETACH=0, or the job's profiler holds CUPTI). */
static int32_t knob_detach(uint64_t *out)
{
    pthread_mutex_lock(&g.cupti_lock);
    int32_t rc = 0;
    if (g.detached || __atomic_load_n(&g.detach_pending, __ATOMIC_ACQUIRE)) {
        out[0] = 1;
    } else if (g.window_id || g.yield_share) {
        rc = -EBUSY; /* close the window / lift the yield first */
    } else if (g.detach == DETACH_NEVER || app_holds_slot()) {
        out[0] = 0;
    } else {
        g.detach_requested = 1;
        uint64_t now = mono_ns();
        if (now - g.start_mono_ns >= g.detach_min_age_ns) {
            arm_detach();
            out[0] = g.detach_subscribed ? 1 : 0;
        } else {
            g.detach_owed = 1; /* made by owed_detach() once the process is old enough */
            g.closed_at_ns = now > GITM_DETACH_OWED_AFTER_NS ? now - GITM_DETACH_OWED_AFTER_NS : 0;
            out[0] = 2;
        }
    }
    out[1] = __atomic_load_n(&g.ring.hdr->detaches, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g.cupti_lock);
    return rc;
}

EXPORT uint64_t gitm_shim_flag(uint32_t flag)
{
    if (flag == 0 || flag >= GITM_FLAGS)
        return 0;
    __atomic_fetch_add(&g.flag_reads[flag], 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&g.flags[flag], __ATOMIC_ACQUIRE);
}

static int knob_flag(const uint64_t *args, uint64_t *out)
{
    if (args[0] == 0 || args[0] >= GITM_FLAGS)
        return -EINVAL;
    out[0] = __atomic_load_n(&g.flags[args[0]], __ATOMIC_ACQUIRE);
    if (args[2] != 1)
        __atomic_store_n(&g.flags[args[0]], args[1], __ATOMIC_RELEASE);
    out[1] = __atomic_load_n(&g.flags[args[0]], __ATOMIC_ACQUIRE);
    out[2] = __atomic_load_n(&g.flag_reads[args[0]], __ATOMIC_RELAXED);
    return 0;
}

static void handle_knob(struct gitm_control *c)
{
    if (g.exiting)
        return; /* unacknowledged: the daemon times out, the process is going */
    uint32_t seq = __atomic_load_n(&c->knob_seq, __ATOMIC_ACQUIRE);
    if (seq == c->knob_ack)
        return;
    switch (c->knob_op) {
    case GITM_KNOB_NOP:
        c->knob_result = 0;
        break;
    case GITM_KNOB_PING:
        c->knob_out[0] = (uint64_t)g.pid;
        c->knob_out[1] = mono_ns();
        c->knob_result = 0;
        break;
    case GITM_KNOB_DETACH: {
        uint64_t out[4] = {0};
        c->knob_result = knob_detach(out);
        memcpy((void *)c->knob_out, out, sizeof out);
        break;
    }
    case GITM_KNOB_FLAG: {
        uint64_t args[4], out[4] = {0};
        memcpy(args, (const void *)c->knob_args, sizeof args);
        c->knob_result = knob_flag(args, out);
        memcpy((void *)c->knob_out, out, sizeof out);
        break;
    }
    case GITM_KNOB_STREAM_PRIORITY:
    case GITM_KNOB_MEMPOOL_RELEASE:
    case GITM_KNOB_HOST_REGISTER:
    case GITM_KNOB_YIELD:
    case GITM_KNOB_CTX_SCHED: {
        uint64_t args[4], out[4] = {0};
        memcpy(args, (const void *)c->knob_args, sizeof args);
        c->knob_result = c->knob_op == GITM_KNOB_STREAM_PRIORITY ? knob_stream_priority(args, out)
                         : c->knob_op == GITM_KNOB_MEMPOOL_RELEASE ? knob_mempool_release(args, out)
                         : c->knob_op == GITM_KNOB_HOST_REGISTER   ? knob_host_register(args, out)
                         : c->knob_op == GITM_KNOB_YIELD           ? knob_yield(args, out)
                                                                   : knob_ctx_sched(args, out);
        memcpy((void *)c->knob_out, out, sizeof out);
        break;
    }
    default:
        c->knob_result = -ENOSYS;
        break;
    }
    __atomic_store_n(&c->knob_ack, seq, __ATOMIC_RELEASE);
}

static void step(void)
{
    if (g.exiting)
        return;
    struct gitm_control *c = g.ring.ctl;
    uint32_t seq = __atomic_load_n(&c->window_seq, __ATOMIC_ACQUIRE);
    if (seq != g.applied_seq) {
        uint32_t want_open = c->window_open, id = c->window_id, mask = c->kinds_mask & GITM_KIND_ALL;
        if (!lock_cupti())
            return;
        if (g.window_id && (!want_open || id != g.window_id))
            close_window("window closed by the daemon");
        if (want_open && !g.window_id)
            open_window(id, mask);
        pthread_mutex_unlock(&g.cupti_lock);
        g.applied_seq = seq;
        __atomic_store_n(&c->window_ack, seq, __ATOMIC_RELEASE);
    }
    if (g.yield_share && mono_ns() >= g.yield_until_ns) { /* nobody renewed it: lift it */
        if (!lock_cupti())
            return;
        yield_off();
        pthread_mutex_unlock(&g.cupti_lock);
    }
    if (g.window_id && __atomic_load_n(&g.app_acted, __ATOMIC_ACQUIRE)) {
        if (!lock_cupti())
            return;
        if (g.window_id)
            abandon_window();
        pthread_mutex_unlock(&g.cupti_lock);
    }
    if (g.window_id) {
        uint64_t now = mono_ns();
        uint64_t timeout = (c->heartbeat_timeout_ms ? c->heartbeat_timeout_ms : 10000) * 1000000ULL;
        uint64_t beat = __atomic_load_n(&c->heartbeat_mono_ns, __ATOMIC_ACQUIRE);
        if (beat + timeout < now) {
            if (!lock_cupti())
                return;
            close_window("daemon heartbeat stale: window closed by the shim");
            pthread_mutex_unlock(&g.cupti_lock);
        } else {
            if (g.learning && now >= g.learn_until_ns) {
                if (!lock_cupti())
                    return;
                if (g.payload_subscribed)
                    enable_learning(0); /* a stream used every step has been seen by now */
                pthread_mutex_unlock(&g.cupti_lock);
            }
            uint64_t every = (c->flush_interval_ms ? c->flush_interval_ms : 500) * 1000000ULL;
            if (now - g.last_flush_ns >= every) {
                if (!lock_cupti())
                    return;
                cuptiActivityFlushAll(0);
                collect_cupti_drops();
                pthread_mutex_unlock(&g.cupti_lock);
                __atomic_fetch_add(&g.ring.hdr->flushes, 1, __ATOMIC_RELAXED);
                g.last_flush_ns = now;
            }
        }
    }
    owed_detach();
    handle_knob(c);
}

static void *control_thread(void *arg)
{
    (void)arg;
    struct timespec ts = {0, POLL_NS};
    while (!g.inert) {
        step();
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

static void child_after_fork(void)
{
    g.inert = 1; /* CUDA is unusable without exec; an exec'd child injects itself anew */
}

static void at_exit(void)
{
    if (getpid() != g.pid)
        return;
    /* Wait (boundedly: fail open) for a CUPTI call the control thread has under way, then no more. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(EXIT_LOCK_NS / 1000000000ULL);
    uint64_t t0 = mono_ns();
    int locked = pthread_mutex_timedlock(&g.cupti_lock, &until) == 0;
    g.exiting = 1;
    DEBUG("exit: control thread's lock %s after %.1f ms", locked ? "taken" : "NOT taken", DEBUG_MS(t0));
    if (g.active && !g.inert && locked && g.window_id) {
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        write_window_marker(g.window_id, 2, g.enabled_mask);
        DEBUG("exit: open window %u flushed, at %.1f ms", g.window_id, DEBUG_MS(t0));
    }
    if (g.active && !g.inert)
        gitm_ring_set_status(&g.ring, GITM_STATUS_IDLE, 0, "process exited");
    if (locked)
        pthread_mutex_unlock(&g.cupti_lock);
}

static size_t env_size(const char *name, size_t def, size_t lo, size_t hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n < lo || n > hi)
        return def;
    return (size_t)n;
}

static void initialize(void)
{
    const char *dir = getenv("GITM_JOB_DIR");
    if (!dir || !*dir)
        return; /* not launched by gitmd: stay out of the way */
    g.pid = getpid();
    g.start_mono_ns = mono_ns();
    g.debug = env_size("GITM_SHIM_DEBUG", 0, 0, 1) == 1;
    g.detach_min_age_ns = env_size("GITM_SHIM_DETACH_MIN_AGE_MS", GITM_DETACH_MIN_AGE_MS, 0, 3600u * 1000) * 1000000ULL;
    const char *detach = getenv("GITM_SHIM_DETACH");
    g.detach = detach && strcmp(detach, "1") == 0       ? DETACH_ONCE
               : detach && strcmp(detach, "every") == 0 ? DETACH_EVERY
                                                        : DETACH_NEVER;
    g.buffer_bytes = env_size("GITM_CUPTI_BUFFER_BYTES", DEFAULT_BUFFER_BYTES, 1u << 16, 256u << 20);
    char err[256];
    uint64_t records = env_size("GITM_RING_RECORDS", DEFAULT_RING_RECORDS, 64, 1u << 24);
    if (gitm_ring_create(&g.ring, dir, records, err, sizeof err) != 0) {
        fprintf(stderr, "gitm shim: capture off: %s\n", err); /* no ring to report into */
        return;
    }
    char why[512];
    if (!load_cupti(why, sizeof why)) {
        g.active = 1;
        switch_off(0, why);
        fprintf(stderr, "gitm shim: capture off: %s\n", why);
        return;
    }
    uint32_t version = 0;
    if (cuptiGetVersion(&version) == CUPTI_SUCCESS)
        g.ring.hdr->cupti_version = version;
    if (version < CUPTI_API_VERSION) {
        g.active = 1;
        switch_off(0, "libcupti is older than the headers the shim was built with");
        return;
    }
    gitm_names_init(&g.names);
    /* with the free guard preloaded, the job's own CUPTI calls are seen (a profiler): name ourselves */
    void (*owner)(const void *, void (*)(void)) =
        (void (*)(const void *, void (*)(void)))dlsym(RTLD_DEFAULT, "gitm_guard_cupti_owner");
    if (owner) {
        owner(&g, app_cupti_used);
        g.app_cupti = (uint32_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_cupti");
        g.app_kinds = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_kinds");
        g.app_completed = (void *(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_completed");
        void (*slot)(int (*)(void)) = (void (*)(int (*)(void)))dlsym(RTLD_DEFAULT, "gitm_guard_cupti_slot");
        if (slot)
            slot(give_up_slot);
    }
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        g.active = 1;
        switch_off(r, "cuptiActivityRegisterCallbacks");
        return;
    }
    pthread_atfork(NULL, NULL, child_after_fork);
    atexit(at_exit);
    g.active = 1;
    gitm_ring_set_status(&g.ring, GITM_STATUS_IDLE, 0, "ready");
    int e = pthread_create(&g.thread, NULL, control_thread, NULL);
    if (e != 0) {
        switch_off(0, "cannot start the control thread");
        return;
    }
    pthread_setname_np(g.thread, "gitm-shim");
    pthread_detach(g.thread);
    DEBUG("initialized (CUPTI %u)", version);
}

EXPORT int InitializeInjection(void)
{
    pthread_once(&g.once, initialize);
    return 1; /* always: a failing shim must never stop the job */
}
