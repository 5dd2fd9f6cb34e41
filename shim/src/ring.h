/* ring.h - the shared-memory ring: create, reserve, publish (internal to the shim and its tests). */
#ifndef GITM_RING_H
#define GITM_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gitm_shim.h"

struct gitm_ring {
    struct gitm_ring_header *hdr;
    struct gitm_control *ctl;
    struct gitm_record *recs;
    uint64_t mask;
    size_t size;
    char path[4096];
};

/* Create ring-<pid>-<start ticks>.gitm in dir (O_EXCL, O_NOFOLLOW, mode 0600) with `capacity`
 * records (rounded up to a power of two, at least 64) and map it. 0 on success, else -errno with a
 * message in err. */
int gitm_ring_create(struct gitm_ring *r, const char *dir, uint64_t capacity, char *err, size_t errlen);
void gitm_ring_unmap(struct gitm_ring *r);

/* Reserve one slot; NULL when the ring is full (the drop is counted). Never blocks. */
struct gitm_record *gitm_ring_reserve(struct gitm_ring *r, uint64_t *pos);
/* Publish a reserved slot: its contents become visible to the reader (release). */
void gitm_ring_publish(struct gitm_record *rec, uint64_t pos);

/* Reader side (the daemon does this in Python; the C tests use it): copy up to max published
 * records from tail, advance tail, return how many. */
size_t gitm_ring_read(struct gitm_ring *r, struct gitm_record *out, size_t max);

void gitm_ring_set_status(struct gitm_ring *r, uint32_t status, int32_t code, const char *reason);
uint64_t gitm_process_start_ticks(pid_t pid);

#endif
