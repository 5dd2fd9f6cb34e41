/*
 * guard.h - libgitm_guard.so, preloaded (LD_PRELOAD) into a gitmd job when its launch plan allows
 * page-locking hot host buffers. It keeps the table of ranges the shim page-locked
 * (cuMemHostRegister) and interposes the calls through which a program gives memory back — free,
 * realloc, reallocarray, munmap, mremap, madvise (DONTNEED, FREE, REMOVE), mmap(MAP_FIXED) — so that
 * a registered range is unregistered *before* its pages go: a registration that outlived its pages
 * would make later copies from the same addresses read the old, pinned pages.
 *
 * The shim (a separate library, loaded by CUDA) finds these functions with dlsym(RTLD_DEFAULT);
 * without the guard preloaded the shim refuses to register anything.
 *
 * Cost when nothing is registered: one relaxed atomic load per call. With ranges registered: a scan
 * of at most GITM_GUARD_MAX entries without a lock; the lock is taken only by a call that overlaps
 * a registered range, and the release callback runs under it, in the calling thread.
 */
#ifndef GITM_GUARD_H
#define GITM_GUARD_H

#include <stdint.h>

#define GITM_GUARD_MAX 16

/* Unregisters `base` (what gitm_guard_add got); called with the guard's lock held. */
typedef int (*gitm_guard_release_fn)(uint64_t base);

/* 0, -EINVAL (empty or overlapping a range already held), -ENOSPC (table full) */
int gitm_guard_add(uint64_t base, uint64_t len, gitm_guard_release_fn release);
/* 1: removed (and released through its callback when `release`), 0: not held (any more) */
int gitm_guard_remove(uint64_t base, int release);
/* 1 if `base` is held */
int gitm_guard_holds(uint64_t base);
/* ranges released because the program freed or unmapped them while registered */
uint64_t gitm_guard_released(void);

/*
 * The job's own CUPTI use (a profiler: torch.profiler's Kineto, ...). The guard also interposes
 * cuptiActivityEnable/Disable(Context), cuptiActivityRegisterCallbacks, cuptiSubscribe,
 * cuptiUnsubscribe and cuptiFinalize, notes what
 * the application — any caller outside the shim — did, and forwards every call unchanged. CUPTI's
 * activity buffer callbacks are process-global: a shim window opened while the application traces
 * would take its records, and the shim's detach (cuptiFinalize) would end its trace.
 */
#define GITM_APP_ENABLED 1   /* the application has activity kinds enabled now */
#define GITM_APP_CALLBACKS 2 /* it registered activity buffer callbacks since its last cuptiFinalize */
#define GITM_APP_SUBSCRIBED 4 /* it holds (or is taking) CUPTI's one subscriber slot: the shim must not take it */

/* The shim names itself (any address inside it): calls from it are not the application's.
 * `on_app` runs in the application's thread when it enables a kind or registers callbacks, before
 * the call is forwarded: it must not call CUPTI. */
void gitm_guard_cupti_owner(const void *inside_owner, void (*on_app)(void));
/* `give_up` runs in the application's thread when its cuptiSubscribe finds the one subscriber slot
 * taken: the shim lets go of the slot if it holds it (returns 1; the guard then retries the call)
 * and takes it no more while GITM_APP_SUBSCRIBED is set. Kineto's whole CUDA trace depends on that
 * call succeeding. */
void gitm_guard_cupti_slot(int (*give_up)(void));
/* the application's activity-buffer completion callback (NULL if none): a buffer of the
 * application's that comes back to the shim's callback is handed to it */
void *gitm_guard_app_completed(void);
/* GITM_APP_* */
uint32_t gitm_guard_app_cupti(void);
/* the activity kinds (below 64, as bits) the application has enabled */
uint64_t gitm_guard_app_kinds(void);

#endif /* GITM_GUARD_H */
