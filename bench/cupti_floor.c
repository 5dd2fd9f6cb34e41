/* CUPTI's own cost, for bench/shim_overhead.py: an injection library that does nothing but what
 * any CUPTI kernel trace must do — CONCURRENT_KERNEL activity on, 4 MB host buffers, every completed
 * record walked and dropped. No ring, no callbacks, no control page. Its slowdown of a launch-bound
 * loop is the floor under the shim's open-window cost.
 * GITM_FLOOR_CONTROL=FILE: activity stays off until FILE holds "1" (polled every millisecond by a
 * thread of ours), then on for the rest of the process, acknowledged by writing FILE.ack; so one
 * process measures itself off (CUPTI loaded, nothing enabled) and on. Without it: on from the start.
 * GITM_FLOOR_REPORT=FILE: the number of records walked, written at exit. */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BUFFER_BYTES (4u << 20)

static uint64_t records;

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

static void report(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("GITM_FLOOR_REPORT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%llu\n", (unsigned long long)__atomic_load_n(&records, __ATOMIC_RELAXED));
        fclose(f);
    }
}

static void *control(void *arg)
{
    const char *path = arg;
    struct timespec ms = {0, 1000000};
    for (;;) {
        FILE *f = fopen(path, "r");
        int on = f && fgetc(f) == '1';
        if (f)
            fclose(f);
        if (on)
            break;
        nanosleep(&ms, NULL);
    }
    CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    char ack[4096];
    snprintf(ack, sizeof ack, "%s.ack", path);
    FILE *f = fopen(ack, "w");
    if (f) {
        fprintf(f, "%d\n", (int)r);
        fclose(f);
    }
    return NULL;
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS)
        return 1;
    atexit(report);
    const char *ctl = getenv("GITM_FLOOR_CONTROL");
    pthread_t t;
    if (ctl && *ctl) {
        if (pthread_create(&t, NULL, control, (void *)ctl) == 0)
            pthread_detach(t);
    } else {
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    return 1;
}
