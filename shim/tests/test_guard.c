/*
 * test_guard.c - run with LD_PRELOAD=build/libgitm_guard.so: every way a program gives memory back
 * releases an overlapping guarded range first (while its pages are still mapped), and nothing else
 * does. No CUDA: the release callback here records what it was called with.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "guard.h"

static int (*add)(uint64_t, uint64_t, gitm_guard_release_fn);
static int (*removef)(uint64_t, int);
static int (*holds)(uint64_t);
static uint64_t (*released)(void);

static int calls, mapped_at_release;
static uint64_t last_base;

static int page_mapped(uint64_t addr)
{
    return msync((void *)(uintptr_t)(addr & ~(uint64_t)4095), 4096, MS_ASYNC) == 0;
}

static int on_release(uint64_t base)
{
    calls++;
    last_base = base;
    mapped_at_release = page_mapped(base);
    void *p = malloc(100); /* a driver frees and allocates inside: must not deadlock */
    free(p);
    return 0;
}

static void expect_release(uint64_t base, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s: released once, before its pages went", what);
    CHECK(calls == 1 && last_base == base && mapped_at_release, msg);
    snprintf(msg, sizeof msg, "%s: no longer held", what);
    CHECK(!holds(base), msg);
    calls = 0;
    last_base = 0;
}

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        void *p = malloc((size_t)(i % 4096) + 1);
        free(p);
    }
    return NULL;
}

int main(void)
{
    add = (int (*)(uint64_t, uint64_t, gitm_guard_release_fn))dlsym(RTLD_DEFAULT, "gitm_guard_add");
    removef = (int (*)(uint64_t, int))dlsym(RTLD_DEFAULT, "gitm_guard_remove");
    holds = (int (*)(uint64_t))dlsym(RTLD_DEFAULT, "gitm_guard_holds");
    released = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_released");
    if (!add || !removef || !holds || !released) {
        fprintf(stderr, "FAIL: the guard is not preloaded (run with LD_PRELOAD=build/libgitm_guard.so)\n");
        return 2;
    }

    /* free of a large (mmap'd) chunk, of a small (heap) chunk, of an unrelated chunk */
    char *big = malloc(8u << 20);
    memset(big, 1, 8u << 20);
    CHECK(add((uint64_t)(uintptr_t)big + 4096, 1u << 20, on_release) == 0, "add big");
    CHECK(holds((uint64_t)(uintptr_t)big + 4096), "holds big");
    char *other = malloc(8u << 20);
    free(other);
    CHECK(calls == 0, "an unrelated free releases nothing");
    uint64_t big_at = (uint64_t)(uintptr_t)big + 4096;
    free(big);
    expect_release(big_at, "free (mmap'd chunk)");

    char *small = malloc(4000);
    uint64_t small_at = (uint64_t)(uintptr_t)small;
    CHECK(add(small_at, 4000, on_release) == 0, "add small");
    free(small);
    expect_release(small_at, "free (heap chunk)");

    /* realloc and reallocarray move or shrink the chunk */
    char *r = malloc(1u << 20);
    CHECK(add((uint64_t)(uintptr_t)r, 1u << 20, on_release) == 0, "add realloc");
    uint64_t rb = (uint64_t)(uintptr_t)r;
    r = realloc(r, 4u << 20);
    expect_release(rb, "realloc");
    CHECK(add((uint64_t)(uintptr_t)r, 4096, on_release) == 0, "add reallocarray");
    rb = (uint64_t)(uintptr_t)r;
    r = reallocarray(r, 16, 1u << 20);
    expect_release(rb, "reallocarray");
    free(r);
    CHECK(calls == 0, "free after release: nothing left to release");

    /* munmap of part of a mapping, madvise, mmap(MAP_FIXED) over it */
    size_t len = 16 * 4096;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 2, len);
    CHECK(add((uint64_t)(uintptr_t)m + 8 * 4096, 4096, on_release) == 0, "add mmap");
    CHECK(munmap(m, 4 * 4096) == 0 && calls == 0, "munmap elsewhere releases nothing");
    CHECK(munmap(m + 6 * 4096, 4 * 4096) == 0, "munmap");
    expect_release((uint64_t)(uintptr_t)m + 8 * 4096, "munmap (overlapping)");
    CHECK(add((uint64_t)(uintptr_t)m + 12 * 4096, 4096, on_release) == 0, "add madvise");
    CHECK(madvise(m + 12 * 4096, 4096, MADV_WILLNEED) == 0 && calls == 0, "madvise WILLNEED releases nothing");
    CHECK(madvise(m + 12 * 4096, 4096, MADV_DONTNEED) == 0, "madvise");
    expect_release((uint64_t)(uintptr_t)m + 12 * 4096, "madvise DONTNEED");
    CHECK(add((uint64_t)(uintptr_t)m + 14 * 4096, 4096, on_release) == 0, "add mmap fixed");
    void *f = mmap(m + 14 * 4096, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(f == m + 14 * 4096, "mmap fixed");
    expect_release((uint64_t)(uintptr_t)m + 14 * 4096, "mmap(MAP_FIXED) over it");
    CHECK(add((uint64_t)(uintptr_t)m + 15 * 4096, 4096, on_release) == 0, "add mremap");
    void *moved = mremap(m + 15 * 4096, 4096, 8192, MREMAP_MAYMOVE);
    CHECK(moved != MAP_FAILED, "mremap");
    expect_release((uint64_t)(uintptr_t)m + 15 * 4096, "mremap");
    munmap(moved, 8192);
    munmap(m + 10 * 4096, 5 * 4096);

    /* the table: explicit removal, overlap, capacity */
    char *t = malloc(1u << 20);
    uint64_t tb = (uint64_t)(uintptr_t)t;
    CHECK(add(tb, 4096, on_release) == 0, "add t");
    CHECK(add(tb + 100, 4096, on_release) == -EINVAL, "an overlapping add is refused");
    CHECK(removef(tb, 1) == 1, "remove");
    expect_release(tb, "remove with release");
    CHECK(removef(tb, 1) == 0 && calls == 0, "a second remove finds nothing");
    CHECK(add(tb, 4096, on_release) == 0 && removef(tb, 0) == 1 && calls == 0, "remove without release");
    for (int i = 0; i < GITM_GUARD_MAX; i++)
        CHECK(add(tb + (uint64_t)i * 8192, 4096, on_release) == 0, "fill the table");
    CHECK(add(tb + (uint64_t)GITM_GUARD_MAX * 8192, 4096, on_release) == -ENOSPC, "a full table says so");
    CHECK(add(0, 4096, on_release) == -EINVAL && add(tb, 0, on_release) == -EINVAL, "empty ranges refused");

    /* threads freeing unrelated memory while ranges are held: no release, no deadlock */
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, churn, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(calls == 0, "unrelated frees from threads release nothing");
    uint64_t before = released();
    free(t); /* the chunk holds every range */
    CHECK(calls == GITM_GUARD_MAX, "one free releases every range inside the chunk");
    CHECK(released() == before + GITM_GUARD_MAX, "released counts them");

    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("guard: all checks passed\n");
    return 0;
}
