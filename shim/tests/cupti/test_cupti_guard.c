/*
 * test_cupti_guard.c - run with LD_PRELOAD=libgitm_guard.so next to fake/libcupti.so.99,
 * fake/libfakeapp.so (the job's profiler) and fake/libfakeowner.so (the shim), both opened
 * RTLD_LOCAL as torch's extension and the shim are, so libcupti is not in the global scope.
 * Checks: the guard forwards every call and its result; it tells the application's CUPTI use from
 * the shim's; the shim's window or cuptiFinalize never leaves the application without its buffer
 * callbacks when it enables a kind again; its cuptiFinalize clears what it knew; the application's
 * cuptiSubscribe gets the one subscriber slot even when the shim holds it (the shim gives it up).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "guard.h"

static int app_acts;

static void on_app(void) { app_acts++; }

/* the shim's side of the subscriber slot */
static int (*o_unsubscribe)(void *);
static void *own_sub;
static int give_ups, shim_holds = 1;

static int give_up(void)
{
    give_ups++;
    if (!own_sub || !shim_holds)
        return 0;
    o_unsubscribe(own_sub);
    own_sub = NULL;
    return 1;
}

static void *sym(void *lib, const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "FAIL: %s not found: %s\n", name, dlerror());
        failures++;
    }
    return f;
}

/* distinct addresses standing for buffer callbacks */
static char app_req, app_cmp, own_req, own_cmp;

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FAKE_DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libfakeapp.so", argv[1]);
    void *app = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    snprintf(path, sizeof path, "%s/libfakeowner.so", argv[1]);
    void *own = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    snprintf(path, sizeof path, "%s/libcupti.so.99", argv[1]);
    void *cupti = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    void (*owner)(const void *, void (*)(void)) =
        (void (*)(const void *, void (*)(void)))dlsym(RTLD_DEFAULT, "gitm_guard_cupti_owner");
    uint32_t (*state)(void) = (uint32_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_cupti");
    uint64_t (*kinds)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_kinds");
    if (!app || !own || !cupti || !owner || !state || !kinds) {
        fprintf(stderr, "FAIL: setup (guard preloaded? fakes built?) %s\n", dlerror());
        return 2;
    }
    void **requested = sym(cupti, "fake_requested");
    uint64_t *enabled = sym(cupti, "fake_enabled");
    int *finalized = sym(cupti, "fake_finalized");
    int (*a_register)(void *, void *) = (int (*)(void *, void *))sym(app, "app_register");
    int (*a_enable)(int) = (int (*)(int))sym(app, "app_enable");
    int (*a_enable_ctx)(int) = (int (*)(int))sym(app, "app_enable_ctx");
    int (*a_disable)(int) = (int (*)(int))sym(app, "app_disable");
    int (*a_finalize)(void) = (int (*)(void))sym(app, "app_finalize");
    const void *(*o_self)(void) = (const void *(*)(void))sym(own, "owner_self");
    int (*o_register)(void *, void *) = (int (*)(void *, void *))sym(own, "owner_register");
    int (*o_enable)(int) = (int (*)(int))sym(own, "owner_enable");
    int (*o_finalize)(void) = (int (*)(void))sym(own, "owner_finalize");
    int (*a_subscribe)(void **) = (int (*)(void **))sym(app, "app_subscribe");
    int (*a_unsubscribe)(void *) = (int (*)(void *))sym(app, "app_unsubscribe");
    int (*o_subscribe)(void **) = (int (*)(void **))sym(own, "owner_subscribe");
    o_unsubscribe = (int (*)(void *))sym(own, "owner_unsubscribe");
    void (*slot)(int (*)(void)) = (void (*)(int (*)(void)))sym(RTLD_DEFAULT, "gitm_guard_cupti_slot");
    void **subscriber = sym(cupti, "fake_subscriber");
    if (failures)
        return 2;

    owner(o_self(), on_app);
    slot(give_up);

    /* the subscriber slot: the shim holds it (a detach pending, payload samples); the profiler asks */
    void *app_sub = NULL;
    CHECK(o_subscribe(&own_sub) == 0 && *subscriber == own_sub && state() == 0, "the shim subscribes, unseen");
    CHECK(a_subscribe(&app_sub) == 0 && give_ups == 1 && own_sub == NULL && app_sub && *subscriber == app_sub,
          "the profiler gets the slot: the shim gave it up and the call was made again");
    CHECK(state() == GITM_APP_SUBSCRIBED && app_acts == 0, "the profiler's subscription seen");
    CHECK(a_unsubscribe(app_sub) == 0 && state() == 0 && *subscriber == NULL, "its unsubscribe seen");
    CHECK(a_subscribe(&app_sub) == 0 && give_ups == 1 && state() == GITM_APP_SUBSCRIBED, "a free slot: no give-up");
    void *second = NULL;
    shim_holds = 0;
    CHECK(a_subscribe(&second) == 39 && give_ups == 2 && second == NULL, "a slot the shim does not hold: CUPTI's answer");
    CHECK(state() == GITM_APP_SUBSCRIBED, "a failed subscribe leaves what the profiler holds");
    CHECK(a_unsubscribe(app_sub) == 0 && *subscriber == NULL && state() == 0, "slot free again");
    CHECK(o_subscribe(&own_sub) == 0 && a_subscribe(&second) == 39 && state() == 0,
          "a slot the shim will not give up: the failed subscribe is not counted");
    CHECK(o_unsubscribe(own_sub) == 0, "the shim lets go");
    own_sub = NULL;
    CHECK(o_register(&own_req, &own_cmp) == 0 && *requested == &own_req, "the shim's registration is forwarded");
    CHECK(state() == 0 && app_acts == 0, "the shim's own calls are not the application's");
    CHECK(o_enable(5) == 0 && (*enabled >> 5 & 1) && kinds() == 0, "the shim's enable is forwarded, not counted");

    CHECK(a_register(&app_req, &app_cmp) == 0 && *requested == &app_req, "the profiler registers its callbacks");
    CHECK(state() == GITM_APP_CALLBACKS && app_acts == 1, "registration seen");
    void *(*completed)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "gitm_guard_app_completed");
    CHECK(completed && completed() == &app_cmp, "the profiler's completion callback is known (its buffers go back to it)");
    CHECK(a_enable(10) == 0 && (*enabled >> 10 & 1), "the profiler's enable is forwarded");
    CHECK(state() == (GITM_APP_CALLBACKS | GITM_APP_ENABLED) && kinds() == (uint64_t)1 << 10 && app_acts == 2,
          "tracing seen");
    CHECK(a_enable(63) == 7, "CUPTI's result comes back unchanged");

    /* a shim window replaces the callbacks; the profiler's next enable gets its own back first */
    CHECK(o_register(&own_req, &own_cmp) == 0 && *requested == &own_req, "the shim's window registers");
    CHECK(a_enable_ctx(11) == 0 && *requested == &app_req && (*enabled >> 11 & 1),
          "the profiler's callbacks are back before its enable");
    CHECK(kinds() == ((uint64_t)1 << 10 | (uint64_t)1 << 11), "context enables counted too");
    CHECK(a_disable(10) == 0 && a_disable(11) == 0 && state() == GITM_APP_CALLBACKS, "disables counted");

    /* the shim detaches (cuptiFinalize): the profiler's next trace still reaches its own callbacks */
    CHECK(o_finalize() == 0 && *finalized == 1 && *requested == NULL, "the shim's finalize is forwarded");
    CHECK(state() == GITM_APP_CALLBACKS, "the shim's finalize does not clear what the profiler did");
    CHECK(a_enable(10) == 0 && *requested == &app_req, "callbacks restored after the shim's finalize");

    /* the profiler lets go of CUPTI */
    CHECK(a_subscribe(&app_sub) == 0 && (state() & GITM_APP_SUBSCRIBED), "subscribed again");
    CHECK(a_finalize() == 0 && state() == 0 && kinds() == 0 && *subscriber == NULL,
          "the profiler's finalize clears its state, its subscription too");
    CHECK(o_register(&own_req, &own_cmp) == 0 && o_enable(3) == 0 && *requested == &own_req,
          "the shim is alone again");

    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("cupti guard: all checks passed\n");
    return 0;
}
