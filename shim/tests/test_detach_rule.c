/* test_detach_rule.c - when a closing window may detach CUPTI (src/detach_rule.h). */
#include "check.h"
#include "detach_rule.h"

#define S (1000ULL * 1000 * 1000)
#define MIN_AGE ((uint64_t)GITM_DETACH_MIN_AGE_MS * 1000 * 1000)

int main(void)
{
    struct gitm_window_counts quiet = {.names_at_open = 40, .names_at_close = 40, .kernels_at_open = 100,
                                       .kernels_at_close = 9000};
    struct gitm_window_counts loading = {.names_at_open = 40, .names_at_close = 43, .kernels_at_open = 100,
                                         .kernels_at_close = 9000};
    struct gitm_window_counts empty = {.names_at_open = 0, .names_at_close = 0, .kernels_at_open = 0,
                                       .kernels_at_close = 0};

    CHECK(gitm_window_quiet(&quiet), "kernels, all known: quiet");
    CHECK(!gitm_window_quiet(&loading), "a new kernel name: still loading");
    CHECK(!gitm_window_quiet(&empty), "no kernels (a framework still importing): not quiet");

    CHECK(!gitm_may_detach(4 * S, MIN_AGE, &quiet), "young (the H200 crashes came at 4-5 s): no detach");
    CHECK(gitm_may_detach(MIN_AGE, MIN_AGE, &quiet), "old enough and quiet: detach");
    CHECK(!gitm_may_detach(30 * S, MIN_AGE, &loading), "loading at 30 s: no detach");
    CHECK(!gitm_may_detach(30 * S, MIN_AGE, &empty), "no kernels at 30 s: no detach");
    CHECK(gitm_may_detach(GITM_DETACH_ANYWAY_AGE_NS, MIN_AGE, &loading), "still meeting new kernels at 60 s: detach");
    CHECK(gitm_may_detach(GITM_DETACH_ANYWAY_AGE_NS, MIN_AGE, &empty), "at 60 s whatever the window saw");
    CHECK(!gitm_may_detach(GITM_DETACH_ANYWAY_AGE_NS, GITM_DETACH_ANYWAY_AGE_NS + 1, &quiet),
          "a larger minimum age (GITM_SHIM_DETACH_MIN_AGE_MS) holds past 60 s");
    CHECK(gitm_may_detach(0, 0, &quiet), "minimum age 0 (benchmarks): a quiet window detaches at once");
    CHECK(!gitm_may_detach(0, 0, &loading), "minimum age 0: a loading window still does not");

    CHECK(!gitm_owed_detach_due(4 * S, MIN_AGE, 3 * S), "owed, but the process is young: not yet");
    CHECK(!gitm_owed_detach_due(MIN_AGE, MIN_AGE, 1 * S), "owed, the window closed a second ago: not yet");
    CHECK(gitm_owed_detach_due(MIN_AGE, MIN_AGE, GITM_DETACH_OWED_AFTER_NS), "owed, old enough, long closed: now");

    if (failures)
        return 1;
    printf("detach rule: ok\n");
    return 0;
}
