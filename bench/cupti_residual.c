/* What each kind of CUPTI collection leaves behind once it is switched off, for bench/cupti_residual.py:
 * an injection library that turns ONE kind of collection on and off when told to (nothing of the
 * shim: no ring, no control page), so that one process measures itself loaded, on, and off again.
 *
 * GITM_RESIDUAL_MODE (what "on" means; "off" undoes it the way a profiler would):
 *   ckernel   CONCURRENT_KERNEL activity          off: cuptiActivityDisable + flush
 *   kernel    KERNEL activity (serialised)         off: cuptiActivityDisable + flush
 *   runtime   RUNTIME API activity                 off: cuptiActivityDisable + flush
 *   driver    DRIVER API activity                  off: cuptiActivityDisable + flush
 *   copies    MEMCPY, MEMSET, SYNCHRONIZATION, MEMORY2 activity (the shim's other window kinds)
 *   memcpy, memset, sync, memory   each of those four alone
 *   launchcb  a subscriber with the kernel-launch callbacks only (runtime and driver), each callback
 *             counting the launch and reading its symbol name   off: cuptiUnsubscribe
 *   ckernel-finalize  CONCURRENT_KERNEL activity   off: disable, flush, cuptiFinalize (from this
 *             library's thread: only for single-threaded probes; the shim never does this)
 *   none      buffer callbacks registered, nothing ever enabled
 * GITM_RESIDUAL_CONTROL=FILE: the harness writes "SEQ STATE" (STATE 1 on, 0 off); a thread of ours
 * polls it every millisecond, applies a new SEQ once and writes "SEQ RC" to FILE.ack (RC: the first
 * CUPTI error, 0 when all went well). */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUFFER_BYTES (4u << 20)

static uint64_t records, launches;
static const char *mode = "none";
static CUpti_SubscriberHandle sub;
static int subscribed;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = NULL;
    *buffer = posix_memalign(&p, 8, BUFFER_BYTES) == 0 ? p : NULL;
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
        __atomic_fetch_add(&records, 1, __ATOMIC_RELAXED);
    free(buffer);
}

static void CUPTIAPI on_launch(void *u, CUpti_CallbackDomain d, CUpti_CallbackId c, const void *info)
{
    (void)u, (void)d, (void)c;
    const CUpti_CallbackData *cb = info;
    if (cb->callbackSite == CUPTI_API_ENTER && cb->symbolName && cb->symbolName[0])
        __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
}

static const CUpti_ActivityKind COPIES[] = {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                            CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_MEMORY2};

static int kinds(CUpti_ActivityKind *out)
{
    if (!strcmp(mode, "ckernel") || !strcmp(mode, "ckernel-finalize"))
        return out[0] = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 1;
    if (!strcmp(mode, "kernel"))
        return out[0] = CUPTI_ACTIVITY_KIND_KERNEL, 1;
    if (!strcmp(mode, "runtime"))
        return out[0] = CUPTI_ACTIVITY_KIND_RUNTIME, 1;
    if (!strcmp(mode, "driver"))
        return out[0] = CUPTI_ACTIVITY_KIND_DRIVER, 1;
    if (!strcmp(mode, "memcpy"))
        return out[0] = CUPTI_ACTIVITY_KIND_MEMCPY, 1;
    if (!strcmp(mode, "memset"))
        return out[0] = CUPTI_ACTIVITY_KIND_MEMSET, 1;
    if (!strcmp(mode, "sync"))
        return out[0] = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, 1;
    if (!strcmp(mode, "memory"))
        return out[0] = CUPTI_ACTIVITY_KIND_MEMORY2, 1;
    if (!strcmp(mode, "copies")) {
        memcpy(out, COPIES, sizeof COPIES);
        return 4;
    }
    return 0;
}

static int set(int on)
{
    int first = 0;
#define KEEP(x)                                                                                                \
    do {                                                                                                       \
        CUptiResult r_ = (x);                                                                                  \
        if (r_ != CUPTI_SUCCESS && !first)                                                                     \
            first = (int)r_;                                                                                   \
    } while (0)
    if (!strcmp(mode, "launchcb")) {
        static const struct {
            CUpti_CallbackDomain d;
            CUpti_CallbackId c;
        } ids[] = {
            {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
            {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000},
            {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
            {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz},
            {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
            {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz},
        };
        if (on && !subscribed) {
            KEEP(cuptiSubscribe(&sub, on_launch, NULL));
            subscribed = !first;
            for (size_t i = 0; subscribed && i < sizeof ids / sizeof ids[0]; i++)
                KEEP(cuptiEnableCallback(1, sub, ids[i].d, ids[i].c));
        } else if (!on && subscribed) {
            KEEP(cuptiUnsubscribe(sub));
            subscribed = 0;
        }
        return first;
    }
    CUpti_ActivityKind k[4];
    int n = kinds(k);
    for (int i = 0; i < n; i++)
        KEEP(on ? cuptiActivityEnable(k[i]) : cuptiActivityDisable(k[i]));
    if (!on) {
        KEEP(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
        if (!strcmp(mode, "ckernel-finalize")) {
            KEEP(cuptiFinalize());
            KEEP(cuptiActivityRegisterCallbacks(requested, completed)); /* attached again, as at load */
        }
    }
    return first;
#undef KEEP
}

static void *control(void *arg)
{
    const char *path = arg;
    char ack[4096];
    snprintf(ack, sizeof ack, "%s.ack", path);
    long done = -1;
    struct timespec ms = {0, 1000000};
    for (;;) {
        long seq = -1;
        int state = 0;
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld %d", &seq, &state) != 2)
                seq = -1;
            fclose(f);
        }
        if (seq >= 0 && seq != done) {
            int rc = set(state);
            done = seq;
            char tmp[4200];
            snprintf(tmp, sizeof tmp, "%s.tmp", ack);
            FILE *a = fopen(tmp, "w");
            if (a) {
                fprintf(a, "%ld %d\n", seq, rc);
                fclose(a);
                rename(tmp, ack);
            }
        }
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static void report(void)
{
    const char *path = getenv("GITM_RESIDUAL_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%llu %llu\n", (unsigned long long)__atomic_load_n(&records, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&launches, __ATOMIC_RELAXED));
        fclose(f);
    }
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    const char *m = getenv("GITM_RESIDUAL_MODE");
    if (m && *m)
        mode = m;
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS)
        return 1;
    atexit(report);
    const char *ctl = getenv("GITM_RESIDUAL_CONTROL");
    pthread_t t;
    if (ctl && *ctl && pthread_create(&t, NULL, control, (void *)ctl) == 0)
        pthread_detach(t);
    return 1;
}
