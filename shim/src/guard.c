/*
 * guard.c - libgitm_guard.so: unregisters page-locked host ranges before the program releases them.
 * See guard.h. Plain C11 + glibc; no CUDA, no CUPTI: the release callback comes from the shim.
 */
#define _GNU_SOURCE
#include "guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- the application's own CUPTI use ------------------------------------------------------------ *
 * No cupti.h here (no CUDA dependency): enums are ints, handles and callbacks pointers, as in the ABI.
 */

#define CUPTI_NOT_INITIALIZED 15 /* CUPTI_ERROR_NOT_INITIALIZED: no libcupti behind us */
#define CUPTI_MULTIPLE_SUBSCRIBERS 39 /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */

static const void *_Atomic owner_base;
static void (*_Atomic on_app)(void);
static _Atomic uint64_t app_kinds; /* kinds below 64 the application enabled and has not disabled */
static atomic_int app_callbacks;
/* The application's buffer callbacks, and whether they are the ones CUPTI holds now: the shim's
 * window (or its cuptiFinalize) replaces them; the application's next enable puts them back first,
 * so its records never go to the shim's buffers. */
static void *_Atomic app_requested, *_Atomic app_completed;
static atomic_int app_holds_callbacks;
static pthread_mutex_t cupti_lock = PTHREAD_MUTEX_INITIALIZER;
/* The application's subscriber (Kineto subscribes once, when its profiler first starts, and fails
 * its whole CUDA trace if the slot is taken): set before its first attempt, so the shim takes the
 * slot no more from then on, until it unsubscribes or finalizes. */
static atomic_int app_subscribed;
static void *_Atomic app_subscriber;
static int (*_Atomic give_up_slot)(void);

EXPORT void gitm_guard_cupti_owner(const void *inside_owner, void (*fn)(void))
{
    Dl_info info;
    if (inside_owner && dladdr(inside_owner, &info) && info.dli_fbase)
        atomic_store(&owner_base, info.dli_fbase);
    atomic_store(&on_app, fn);
}

EXPORT void gitm_guard_cupti_slot(int (*give_up)(void))
{
    atomic_store(&give_up_slot, give_up);
}

EXPORT void *gitm_guard_app_completed(void)
{
    return atomic_load(&app_completed);
}

EXPORT uint64_t gitm_guard_app_kinds(void)
{
    return atomic_load(&app_kinds);
}

EXPORT uint32_t gitm_guard_app_cupti(void)
{
    return (atomic_load(&app_kinds) ? GITM_APP_ENABLED : 0) | (atomic_load(&app_callbacks) ? GITM_APP_CALLBACKS : 0) |
           (atomic_load(&app_subscribed) ? GITM_APP_SUBSCRIBED : 0);
}

/* the caller of the interposed function is the application (not the shim) */
static int from_app(const void *ret)
{
    const void *base = atomic_load(&owner_base);
    Dl_info info;
    return !(base && dladdr(ret, &info) && info.dli_fbase == base);
}

static void app_acts(void)
{
    void (*fn)(void) = atomic_load(&on_app);
    if (fn)
        fn();
}

static int find_cupti(struct dl_phdr_info *info, size_t size, void *out)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcupti.so") && strlen(info->dlpi_name) < 4096) {
        strcpy((char *)out, info->dlpi_name); /* opened after the walk: no dlopen under its lock */
        return 1;
    }
    return 0;
}

/* The real CUPTI function: libcupti loads after us, often as a dependency of a library opened
 * RTLD_LOCAL (torch's extension, the shim itself), where RTLD_NEXT does not see it: then it is
 * asked by handle. */
static void *cupti_fn(void *_Atomic *slot, const char *name)
{
    void *f = atomic_load(slot);
    if (f)
        return f;
    f = dlsym(RTLD_NEXT, name);
    if (!f) {
        char path[4096] = "";
        dl_iterate_phdr(find_cupti, path);
        void *lib = path[0] ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (lib) {
            f = dlsym(lib, name);
            dlclose(lib); /* RTLD_NOLOAD took a reference: give it back, the library stays */
        }
    }
    if (f && f != dlsym(RTLD_DEFAULT, name)) /* never ourselves */
        atomic_store(slot, f);
    else if (f)
        f = NULL;
    return f;
}

static void note_kind(int kind, int on)
{
    if (kind < 0 || kind >= 64)
        return;
    if (on)
        atomic_fetch_or(&app_kinds, (uint64_t)1 << kind);
    else
        atomic_fetch_and(&app_kinds, ~((uint64_t)1 << kind));
}

/* GITM_GUARD_TRACE=1: each CUPTI call the guard sees, on stderr (who called, where it went) */
static int tracing(void)
{
    static atomic_int on = -1;
    int v = atomic_load(&on);
    if (v < 0) {
        v = getenv("GITM_GUARD_TRACE") != NULL;
        atomic_store(&on, v);
    }
    return v;
}

static void trace(const char *fn, int app, void *real, long arg, int r)
{
    if (!tracing())
        return;
    Dl_info info;
    const char *lib = real && dladdr(real, &info) && info.dli_fname ? info.dli_fname : "(none)";
    fprintf(stderr, "gitm-guard: %s(%ld) by %s -> %s = %d\n", fn, arg, app ? "app" : "shim", lib, r);
}

/* after a forwarded enable (on=1) or disable (on=0) of an activity kind */
static int kind_done(const char *fn, int app, void *real, int kind, int on, int r)
{
    trace(fn, app, real, kind, r);
    if (app && r == 0)
        note_kind(kind, on);
    return r;
}

static void *_Atomic real_enable, *_Atomic real_disable, *_Atomic real_enable_ctx, *_Atomic real_disable_ctx,
    *_Atomic real_register, *_Atomic real_finalize, *_Atomic real_subscribe, *_Atomic real_unsubscribe;

/* before an application enable: its callbacks back in CUPTI if the shim's replaced them */
static void app_enables(void)
{
    app_acts();
    if (atomic_load(&app_holds_callbacks) || !atomic_load(&app_requested))
        return;
    int (*reg)(void *, void *) = (int (*)(void *, void *))cupti_fn(&real_register, "cuptiActivityRegisterCallbacks");
    pthread_mutex_lock(&cupti_lock);
    if (reg && !atomic_load(&app_holds_callbacks) && reg(atomic_load(&app_requested), atomic_load(&app_completed)) == 0)
        atomic_store(&app_holds_callbacks, 1);
    pthread_mutex_unlock(&cupti_lock);
}

EXPORT int cuptiActivityEnable(int kind)
{
    int app = from_app(__builtin_return_address(0));
    if (app)
        app_enables();
    int (*f)(int) = (int (*)(int))cupti_fn(&real_enable, "cuptiActivityEnable");
    return kind_done("cuptiActivityEnable", app, (void *)f, kind, 1, f ? f(kind) : CUPTI_NOT_INITIALIZED);
}

EXPORT int cuptiActivityDisable(int kind)
{
    int app = from_app(__builtin_return_address(0));
    int (*f)(int) = (int (*)(int))cupti_fn(&real_disable, "cuptiActivityDisable");
    return kind_done("cuptiActivityDisable", app, (void *)f, kind, 0, f ? f(kind) : CUPTI_NOT_INITIALIZED);
}

EXPORT int cuptiActivityEnableContext(void *ctx, int kind)
{
    int app = from_app(__builtin_return_address(0));
    if (app)
        app_enables();
    int (*f)(void *, int) = (int (*)(void *, int))cupti_fn(&real_enable_ctx, "cuptiActivityEnableContext");
    return kind_done("cuptiActivityEnableContext", app, (void *)f, kind, 1, f ? f(ctx, kind) : CUPTI_NOT_INITIALIZED);
}

EXPORT int cuptiActivityDisableContext(void *ctx, int kind)
{
    int app = from_app(__builtin_return_address(0));
    int (*f)(void *, int) = (int (*)(void *, int))cupti_fn(&real_disable_ctx, "cuptiActivityDisableContext");
    return kind_done("cuptiActivityDisableContext", app, (void *)f, kind, 0, f ? f(ctx, kind) : CUPTI_NOT_INITIALIZED);
}

EXPORT int cuptiActivityRegisterCallbacks(void *requested, void *completed)
{
    int app = from_app(__builtin_return_address(0));
    if (app)
        app_acts();
    int (*f)(void *, void *) = (int (*)(void *, void *))cupti_fn(&real_register, "cuptiActivityRegisterCallbacks");
    if (!f)
        return CUPTI_NOT_INITIALIZED;
    pthread_mutex_lock(&cupti_lock);
    int r = f(requested, completed);
    trace("cuptiActivityRegisterCallbacks", app, (void *)f, 0, r);
    if (r == 0 && app) {
        atomic_store(&app_requested, requested);
        atomic_store(&app_completed, completed);
        atomic_store(&app_callbacks, 1);
    }
    if (r == 0)
        atomic_store(&app_holds_callbacks, app);
    pthread_mutex_unlock(&cupti_lock);
    return r;
}

/* The application takes the subscriber slot: if the shim holds it (a detach waiting for the next
 * driver call, payload samples, a yield), the shim lets go and the call is made again. */
EXPORT int cuptiSubscribe(void **subscriber, void *callback, void *userdata)
{
    int app = from_app(__builtin_return_address(0));
    int (*f)(void **, void *, void *) = (int (*)(void **, void *, void *))cupti_fn(&real_subscribe, "cuptiSubscribe");
    if (!f)
        return CUPTI_NOT_INITIALIZED;
    int before = app ? atomic_exchange(&app_subscribed, 1) : 0;
    int r = f(subscriber, callback, userdata);
    if (app && r == CUPTI_MULTIPLE_SUBSCRIBERS) {
        int (*give_up)(void) = atomic_load(&give_up_slot);
        if (give_up && give_up())
            r = f(subscriber, callback, userdata);
    }
    trace("cuptiSubscribe", app, (void *)f, 0, r);
    if (app && r == 0) {
        atomic_store(&app_subscriber, subscriber ? *subscriber : NULL);
    } else if (app) {
        atomic_store(&app_subscribed, before); /* what it held before, it still holds */
    }
    return r;
}

EXPORT int cuptiUnsubscribe(void *subscriber)
{
    int app = from_app(__builtin_return_address(0));
    int (*f)(void *) = (int (*)(void *))cupti_fn(&real_unsubscribe, "cuptiUnsubscribe");
    int r = f ? f(subscriber) : CUPTI_NOT_INITIALIZED;
    trace("cuptiUnsubscribe", app, (void *)f, 0, r);
    if (app && r == 0 && subscriber && subscriber == atomic_load(&app_subscriber)) {
        atomic_store(&app_subscriber, NULL);
        atomic_store(&app_subscribed, 0);
    }
    return r;
}

EXPORT int cuptiFinalize(void)
{
    int app = from_app(__builtin_return_address(0));
    if (app) { /* the application let go of CUPTI */
        atomic_store(&app_subscribed, 0);
        atomic_store(&app_subscriber, NULL);
        atomic_store(&app_kinds, 0);
        atomic_store(&app_callbacks, 0);
        atomic_store(&app_requested, NULL);
        atomic_store(&app_completed, NULL);
    }
    int (*f)(void) = (int (*)(void))cupti_fn(&real_finalize, "cuptiFinalize");
    if (!f)
        return CUPTI_NOT_INITIALIZED;
    pthread_mutex_lock(&cupti_lock);
    int r = f();
    trace("cuptiFinalize", app, (void *)f, 0, r);
    atomic_store(&app_holds_callbacks, 0); /* nobody's callbacks are registered after it */
    pthread_mutex_unlock(&cupti_lock);
    return r;
}
