/* CUPTI's own cost, for bench/shim_overhead.py: an injection library that does nothing but what
 * any CUPTI kernel trace must do — CONCURRENT_KERNEL activity on from the start, 4 MB host buffers,
 * every completed record walked and dropped. No ring, no callbacks, no control thread. Its slowdown
 * of a launch-bound loop is the floor under the shim's open-window cost. */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(requested, completed) == CUPTI_SUCCESS &&
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS)
        atexit(report);
    return 1;
}
