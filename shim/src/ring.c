/*
 * ring.c - the per-process shared-memory ring of fixed 64-byte records.
 *
 * Workflow in brief: create the file in the job's directory, size and map it, fill the header and
 * control page, store the magic last. Producers reserve with a CAS on head (a full ring counts a
 * drop and returns NULL: never blocks), write the slot, then publish it by storing seq = pos + 1
 * with release order. The reader copies slots while seq matches and then advances tail.
 */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t round_pow2(uint64_t v)
{
    uint64_t p = 64;
    while (p < v && p < (1ULL << 30))
        p <<= 1;
    return p;
}

uint64_t gitm_process_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p)
        return 0;
    /* after ")": field 3 (state) ... field 22 (starttime) */
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    unsigned long long ticks = 0;
    if (sscanf(p, "%llu", &ticks) != 1)
        return 0;
    return ticks;
}

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int gitm_ring_create(struct gitm_ring *r, const char *dir, uint64_t capacity, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    capacity = round_pow2(capacity);
    pid_t pid = getpid();
    uint64_t ticks = gitm_process_start_ticks(pid);
    int n = snprintf(r->path, sizeof r->path, "%s/ring-%d-%llu.gitm", dir, (int)pid, (unsigned long long)ticks);
    if (n < 0 || (size_t)n >= sizeof r->path) {
        snprintf(err, errlen, "ring path too long");
        return -ENAMETOOLONG;
    }
    size_t records_offset = 2 * GITM_PAGE_SIZE;
    size_t size = records_offset + (size_t)capacity * GITM_RECORD_SIZE;
    int fd = open(r->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create %s: %s", r->path, strerror(e));
        return -e;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot size %s: %s", r->path, strerror(e));
        close(fd);
        unlink(r->path);
        return -e;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", r->path, strerror(e));
        unlink(r->path);
        return -e;
    }
    r->size = size;
    r->hdr = (struct gitm_ring_header *)base;
    r->ctl = (struct gitm_control *)((char *)base + GITM_PAGE_SIZE);
    r->recs = (struct gitm_record *)((char *)base + records_offset);
    r->mask = capacity - 1;

    struct gitm_ring_header *h = r->hdr;
    h->abi_version = GITM_ABI_VERSION;
    h->record_size = GITM_RECORD_SIZE;
    h->capacity = capacity;
    h->records_offset = records_offset;
    h->file_size = size;
    h->pid = (int32_t)pid;
    h->start_time_ticks = ticks;
    h->created_real_ns = now_ns(CLOCK_REALTIME);
    h->status = GITM_STATUS_INIT;
    r->ctl->magic = GITM_CONTROL_MAGIC;
    __atomic_store_n(&h->magic, (uint64_t)GITM_RING_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

void gitm_ring_unmap(struct gitm_ring *r)
{
    if (r->hdr) {
        munmap(r->hdr, r->size);
        r->hdr = NULL;
    }
}

struct gitm_record *gitm_ring_reserve(struct gitm_ring *r, uint64_t *pos)
{
    struct gitm_ring_header *h = r->hdr;
    uint64_t head = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_ACQUIRE);
        if (head - tail > r->mask) {
            __atomic_fetch_add(&h->ring_drops, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        if (__atomic_compare_exchange_n(&h->head, &head, head + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            break;
    }
    *pos = head;
    return &r->recs[head & r->mask];
}

void gitm_ring_publish(struct gitm_record *rec, uint64_t pos)
{
    __atomic_store_n(&rec->seq, pos + 1, __ATOMIC_RELEASE);
}

size_t gitm_ring_read(struct gitm_ring *r, struct gitm_record *out, size_t max)
{
    struct gitm_ring_header *h = r->hdr;
    uint64_t tail = __atomic_load_n(&h->tail, __ATOMIC_RELAXED);
    size_t n = 0;
    while (n < max) {
        struct gitm_record *rec = &r->recs[(tail + n) & r->mask];
        if (__atomic_load_n(&rec->seq, __ATOMIC_ACQUIRE) != tail + n + 1)
            break;
        memcpy(&out[n], rec, sizeof *rec);
        n++;
    }
    __atomic_store_n(&h->tail, tail + n, __ATOMIC_RELEASE);
    return n;
}

void gitm_ring_set_status(struct gitm_ring *r, uint32_t status, int32_t code, const char *reason)
{
    struct gitm_ring_header *h = r->hdr;
    if (!h)
        return;
    if (reason) {
        size_t len = strnlen(reason, GITM_STATUS_REASON_LEN - 1);
        memcpy(h->status_reason, reason, len);
        h->status_reason[len] = 0;
    }
    h->status_code = code;
    __atomic_store_n(&h->status, status, __ATOMIC_RELEASE);
}
