/*
 * guard.c - libgitm_guard.so: unregisters page-locked host ranges before the program releases them.
 * See guard.h. Plain C11 + glibc; no CUDA, no CUPTI: the release callback comes from the shim.
 */
#define _GNU_SOURCE
#include "guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

static struct slot {
    _Atomic uint64_t base; /* 0: free slot; stored last when adding (release), first when removing */
    uint64_t len;
    gitm_guard_release_fn release;
} slots[GITM_GUARD_MAX];
static atomic_int held;
static _Atomic uint64_t released;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static TLS int in_guard;  /* this thread runs a release callback: its own frees pass straight on */
static TLS int resolving; /* this thread is inside dlsym for the real functions */

extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);

static void (*real_free)(void *);
static void *(*real_realloc)(void *, size_t);
static void *(*real_reallocarray)(void *, size_t, size_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static int (*real_madvise)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);

static void *next(const char *name)
{
    resolving = 1;
    void *f = dlsym(RTLD_NEXT, name);
    resolving = 0;
    return f;
}

__attribute__((constructor)) static void resolve(void)
{
    real_free = (void (*)(void *))next("free");
    real_realloc = (void *(*)(void *, size_t))next("realloc");
    real_reallocarray = (void *(*)(void *, size_t, size_t))next("reallocarray");
    real_munmap = (int (*)(void *, size_t))next("munmap");
    real_mremap = (void *(*)(void *, size_t, size_t, int, ...))next("mremap");
    real_madvise = (int (*)(void *, size_t, int))next("madvise");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))next("mmap");
    real_mmap64 = (void *(*)(void *, size_t, int, int, int, off_t))next("mmap64");
}

/* ---- the table ---------------------------------------------------------------------------------- */

EXPORT int gitm_guard_add(uint64_t base, uint64_t len, gitm_guard_release_fn release)
{
    if (!base || !len || !release || base + len < base)
        return -EINVAL;
    int rc = -ENOSPC;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < GITM_GUARD_MAX; i++) {
        uint64_t b = atomic_load_explicit(&slots[i].base, memory_order_relaxed);
        if (b && b < base + len && base < b + slots[i].len) {
            rc = -EINVAL;
            goto out;
        }
    }
    for (int i = 0; i < GITM_GUARD_MAX; i++) {
        if (atomic_load_explicit(&slots[i].base, memory_order_relaxed))
            continue;
        slots[i].len = len;
        slots[i].release = release;
        atomic_store_explicit(&slots[i].base, base, memory_order_release);
        atomic_fetch_add_explicit(&held, 1, memory_order_release);
        rc = 0;
        break;
    }
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* with the lock held */
static void drop(int i, int release)
{
    uint64_t b = atomic_load_explicit(&slots[i].base, memory_order_relaxed);
    atomic_store_explicit(&slots[i].base, 0, memory_order_release);
    atomic_fetch_sub_explicit(&held, 1, memory_order_release);
    if (release) {
        in_guard = 1;
        slots[i].release(b);
        in_guard = 0;
    }
}

EXPORT int gitm_guard_remove(uint64_t base, int release)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < GITM_GUARD_MAX; i++)
        if (atomic_load_explicit(&slots[i].base, memory_order_relaxed) == base && base) {
            drop(i, release);
            found = 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

EXPORT int gitm_guard_holds(uint64_t base)
{
    for (int i = 0; i < GITM_GUARD_MAX; i++)
        if (base && atomic_load_explicit(&slots[i].base, memory_order_acquire) == base)
            return 1;
    return 0;
}

EXPORT uint64_t gitm_guard_released(void)
{
    return atomic_load_explicit(&released, memory_order_relaxed);
}

/* [lo, hi) is about to be given back: unregister every held range it overlaps, first. */
static void release_range(uint64_t lo, uint64_t hi)
{
    if (!atomic_load_explicit(&held, memory_order_relaxed) || in_guard || hi <= lo)
        return;
    int any = 0;
    for (int i = 0; i < GITM_GUARD_MAX && !any; i++) {
        uint64_t b = atomic_load_explicit(&slots[i].base, memory_order_acquire);
        any = b && b < hi && lo < b + slots[i].len;
    }
    if (!any)
        return; /* the common case: no lock taken */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < GITM_GUARD_MAX; i++) {
        uint64_t b = atomic_load_explicit(&slots[i].base, memory_order_relaxed);
        if (b && b < hi && lo < b + slots[i].len) {
            drop(i, 1);
            atomic_fetch_add_explicit(&released, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&lock);
}

static void release_chunk(void *p)
{
    if (p && atomic_load_explicit(&held, memory_order_relaxed) && !in_guard)
        release_range((uint64_t)(uintptr_t)p, (uint64_t)(uintptr_t)p + malloc_usable_size(p));
}

/* ---- the interposed calls ---------------------------------------------------------------------- */

EXPORT void free(void *p)
{
    release_chunk(p);
    if (!real_free) {
        if (resolving) {
            __libc_free(p);
            return;
        }
        real_free = (void (*)(void *))next("free");
        if (!real_free)
            real_free = __libc_free;
    }
    real_free(p);
}

EXPORT void *realloc(void *p, size_t n)
{
    release_chunk(p);
    if (!real_realloc) {
        if (resolving)
            return __libc_realloc(p, n);
        real_realloc = (void *(*)(void *, size_t))next("realloc");
        if (!real_realloc)
            real_realloc = __libc_realloc;
    }
    return real_realloc(p, n);
}

EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
    release_chunk(p);
    if (real_reallocarray)
        return real_reallocarray(p, nmemb, size);
    size_t n;
    if (__builtin_mul_overflow(nmemb, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

EXPORT int munmap(void *addr, size_t len)
{
    release_range((uint64_t)(uintptr_t)addr, (uint64_t)(uintptr_t)addr + len);
    if (real_munmap)
        return real_munmap(addr, len);
    return (int)syscall(SYS_munmap, addr, len);
}

EXPORT void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_address = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_address = va_arg(ap, void *);
        va_end(ap);
        release_range((uint64_t)(uintptr_t)new_address, (uint64_t)(uintptr_t)new_address + new_size);
    }
    release_range((uint64_t)(uintptr_t)old, (uint64_t)(uintptr_t)old + old_size);
    if (real_mremap)
        return real_mremap(old, old_size, new_size, flags, new_address);
    return (void *)syscall(SYS_mremap, old, old_size, new_size, flags, new_address);
}

EXPORT int madvise(void *addr, size_t len, int advice)
{
    if (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE)
        release_range((uint64_t)(uintptr_t)addr, (uint64_t)(uintptr_t)addr + len);
    if (real_madvise)
        return real_madvise(addr, len, advice);
    return (int)syscall(SYS_madvise, addr, len, advice);
}

static void *map(void *(*real)(void *, size_t, int, int, int, off_t), void *addr, size_t len, int prot,
                 int flags, int fd, off_t off)
{
    if (flags & MAP_FIXED)
        release_range((uint64_t)(uintptr_t)addr, (uint64_t)(uintptr_t)addr + len);
    if (real)
        return real(addr, len, prot, flags, fd, off);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return map(real_mmap, addr, len, prot, flags, fd, off);
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return map(real_mmap64 ? real_mmap64 : real_mmap, addr, len, prot, flags, fd, off);
}
