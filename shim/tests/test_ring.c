/*
 * test_ring.c - the ring without CUPTI: wraparound, overflow counted as drops, a reserved but
 * unpublished (torn) slot never read, and several producer threads against a concurrent reader.
 * Prints "N passed, N failed" last; exits non-zero on any failure.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/ring.h"

static int passed, failed;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static char dir[] = "/tmp/gitm-ring-test-XXXXXX";

static int fresh(struct gitm_ring *r, uint64_t cap)
{
    char err[256];
    char sub[512];
    static int n;
    snprintf(sub, sizeof sub, "%s/%d", dir, n++);
    if (mkdir(sub, 0700) != 0)
        return -1;
    return gitm_ring_create(r, sub, cap, err, sizeof err);
}

static void put(struct gitm_ring *r, uint32_t v)
{
    uint64_t pos;
    struct gitm_record *rec = gitm_ring_reserve(r, &pos);
    if (!rec)
        return;
    rec->type = GITM_REC_KERNEL;
    rec->correlation_id = v;
    rec->start_ns = v;
    rec->end_ns = (uint64_t)v * 2;
    gitm_ring_publish(rec, pos);
}

static int test_header(void)
{
    struct gitm_ring r;
    CHECK(fresh(&r, 100) == 0);
    CHECK(r.hdr->magic == GITM_RING_MAGIC);
    CHECK(r.hdr->capacity == 128); /* rounded up to a power of two */
    CHECK(r.hdr->record_size == 64 && r.hdr->abi_version == GITM_ABI_VERSION);
    CHECK(r.hdr->pid == getpid() && r.hdr->start_time_ticks > 0);
    CHECK(r.ctl->magic == GITM_CONTROL_MAGIC);
    CHECK(strstr(r.path, "/ring-") != NULL);
    gitm_ring_unmap(&r);
    return 0;
}

static int test_wraparound(void)
{
    struct gitm_ring r;
    struct gitm_record out[64];
    CHECK(fresh(&r, 64) == 0);
    uint32_t expect = 0;
    for (int lap = 0; lap < 10; lap++) {
        for (int i = 0; i < 50; i++)
            put(&r, (uint32_t)(lap * 50 + i));
        size_t n = gitm_ring_read(&r, out, 64);
        CHECK(n == 50);
        for (size_t i = 0; i < n; i++)
            CHECK(out[i].correlation_id == expect++ && out[i].end_ns == out[i].start_ns * 2);
    }
    CHECK(r.hdr->ring_drops == 0 && r.hdr->head == 500 && r.hdr->tail == 500);
    gitm_ring_unmap(&r);
    return 0;
}

static int test_overflow_counts_drops(void)
{
    struct gitm_ring r;
    struct gitm_record out[64];
    CHECK(fresh(&r, 64) == 0);
    for (int i = 0; i < 100; i++)
        put(&r, (uint32_t)i);
    CHECK(r.hdr->ring_drops == 36);
    CHECK(gitm_ring_read(&r, out, 64) == 64);
    CHECK(out[0].correlation_id == 0 && out[63].correlation_id == 63); /* the oldest are kept */
    put(&r, 1000);
    CHECK(gitm_ring_read(&r, out, 64) == 1 && out[0].correlation_id == 1000);
    gitm_ring_unmap(&r);
    return 0;
}

static int test_torn_record_never_read(void)
{
    struct gitm_ring r;
    struct gitm_record out[8];
    CHECK(fresh(&r, 64) == 0);
    put(&r, 1);
    uint64_t pos;
    struct gitm_record *torn = gitm_ring_reserve(&r, &pos); /* reserved, being written */
    CHECK(torn != NULL);
    torn->correlation_id = 999;
    put(&r, 3); /* a later producer publishes first */
    CHECK(gitm_ring_read(&r, out, 8) == 1 && out[0].correlation_id == 1);
    CHECK(gitm_ring_read(&r, out, 8) == 0); /* stops at the unpublished slot */
    torn->correlation_id = 2;
    gitm_ring_publish(torn, pos);
    CHECK(gitm_ring_read(&r, out, 8) == 2 && out[0].correlation_id == 2 && out[1].correlation_id == 3);
    gitm_ring_unmap(&r);
    return 0;
}

struct producer_arg {
    struct gitm_ring *r;
    uint32_t id;
    uint32_t count;
};

static void *producer(void *p)
{
    struct producer_arg *a = p;
    for (uint32_t i = 0; i < a->count; i++) {
        uint64_t pos;
        struct gitm_record *rec;
        while (!(rec = gitm_ring_reserve(a->r, &pos)))
            ; /* the test wants every record: spin (the shim itself drops instead) */
        rec->type = GITM_REC_KERNEL;
        rec->device = (uint16_t)a->id;
        rec->correlation_id = i;
        gitm_ring_publish(rec, pos);
    }
    return NULL;
}

static int test_many_producers_one_reader(void)
{
    enum { THREADS = 4, EACH = 200000 };
    struct gitm_ring r;
    CHECK(fresh(&r, 1024) == 0);
    pthread_t t[THREADS];
    struct producer_arg args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct producer_arg){&r, (uint32_t)i, EACH};
        pthread_create(&t[i], NULL, producer, &args[i]);
    }
    uint32_t next[THREADS] = {0};
    struct gitm_record out[256];
    size_t total = 0;
    while (total < (size_t)THREADS * EACH) {
        size_t n = gitm_ring_read(&r, out, 256);
        for (size_t i = 0; i < n; i++) {
            CHECK(out[i].device < THREADS);
            CHECK(out[i].correlation_id == next[out[i].device]); /* each producer's order holds */
            next[out[i].device]++;
        }
        total += n;
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        CHECK(next[i] == EACH);
    gitm_ring_unmap(&r);
    return 0;
}

static int test_existing_file_is_not_clobbered(void)
{
    struct gitm_ring a, b;
    char err[256];
    char sub[512];
    snprintf(sub, sizeof sub, "%s/dup", dir);
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(gitm_ring_create(&a, sub, 64, err, sizeof err) == 0);
    CHECK(gitm_ring_create(&b, sub, 64, err, sizeof err) < 0); /* same pid + start time: O_EXCL */
    CHECK(strstr(err, "cannot create") != NULL);
    CHECK(gitm_ring_create(&b, "/nonexistent/dir", 64, err, sizeof err) < 0);
    gitm_ring_unmap(&a);
    return 0;
}

#define RUN(t)                                                                                     \
    do {                                                                                           \
        if (t() == 0) {                                                                            \
            passed++;                                                                              \
            printf("ok   %s\n", #t);                                                           \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s\n", #t);                                                           \
        }                                                                                          \
    } while (0)

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_header);
    RUN(test_wraparound);
    RUN(test_overflow_counts_drops);
    RUN(test_torn_record_never_read);
    RUN(test_many_producers_one_reader);
    RUN(test_existing_file_is_not_clobbered);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
