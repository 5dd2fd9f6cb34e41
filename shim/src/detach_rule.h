/* detach_rule.h - when the shim may detach CUPTI (cuptiFinalize) rather than only disable its kinds.
 * Pure arithmetic on what the shim counts, so the C tests check it without CUPTI.
 *
 * By default the shim never detaches (shim.c, workflow step 4: the finalize raced with another
 * thread's kernel launch inside CUPTI and killed jobs on the H200, 2026-12-03). These rules apply
 * only when it may: GITM_SHIM_DETACH=1 (the one detach gitmd asks for at the end of a process's
 * observation) and the legacy GITM_SHIM_DETACH=every cycle of bench/window_stress.py.
 *
 * Detaching and attaching CUPTI anew while a job is still starting crashed jobs inside CUPTI
 * (bench/window_stress.py, tenth session: 3 of 22 runs). So a detach is made only once the process
 * is min_age_ns old (default GITM_DETACH_MIN_AGE_MS); asked earlier it is owed. In the legacy cycle a
 * window must also have been quiet: it saw kernels, and none it had not seen before; past
 * GITM_DETACH_ANYWAY_AGE_NS a process that keeps meeting new kernels is detached all the same.
 */
#ifndef GITM_DETACH_RULE_H
#define GITM_DETACH_RULE_H
#include <stdint.h>

#define GITM_DETACH_MIN_AGE_MS 10000
#define GITM_DETACH_ANYWAY_AGE_NS (60ULL * 1000 * 1000 * 1000)
/* A window that closed without detaching leaves the detach owed: it is made, with no window open,
 * once the process is min_age_ns old and that window closed GITM_DETACH_OWED_AFTER_NS ago (what was
 * loading then has had time to finish), not at the next window, which the daemon may space out to
 * minutes for a launch-bound job: CUPTI left attached costs such a job ~40% between windows. */
#define GITM_DETACH_OWED_AFTER_NS (5ULL * 1000 * 1000 * 1000)

struct gitm_window_counts {
    uint64_t names_at_open, names_at_close;     /* kernel names interned */
    uint64_t kernels_at_open, kernels_at_close; /* kernel records delivered */
};

static inline int gitm_window_quiet(const struct gitm_window_counts *w)
{
    return w->names_at_close == w->names_at_open && w->kernels_at_close != w->kernels_at_open;
}

static inline int gitm_may_detach(uint64_t age_ns, uint64_t min_age_ns, const struct gitm_window_counts *w)
{
    if (age_ns < min_age_ns)
        return 0;
    return gitm_window_quiet(w) || age_ns >= GITM_DETACH_ANYWAY_AGE_NS;
}

static inline int gitm_owed_detach_due(uint64_t age_ns, uint64_t min_age_ns, uint64_t since_close_ns)
{
    return age_ns >= min_age_ns && since_close_ns >= GITM_DETACH_OWED_AFTER_NS;
}

#endif
