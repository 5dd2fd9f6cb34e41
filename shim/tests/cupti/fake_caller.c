/* fake_caller.c - built twice: as the job's profiler (libfakeapp.so) and as the shim
 * (libfakeowner.so, -DOWNER). Both call CUPTI through the dynamic linker, as Kineto and the shim do. */
#include <stdint.h>

int cuptiActivityRegisterCallbacks(void *requested, void *completed);
int cuptiActivityEnable(int kind);
int cuptiActivityDisable(int kind);
int cuptiActivityEnableContext(void *ctx, int kind);
int cuptiFinalize(void);
int cuptiSubscribe(void **subscriber, void *callback, void *userdata);
int cuptiUnsubscribe(void *subscriber);

#ifdef OWNER
#define P(name) owner_##name
#else
#define P(name) app_##name
#endif

static char marker; /* an address inside this library */

const void *P(self)(void) { return &marker; }
int P(register)(void *req, void *cmp) { return cuptiActivityRegisterCallbacks(req, cmp); }
int P(enable)(int kind) { return cuptiActivityEnable(kind); }
int P(enable_ctx)(int kind) { return cuptiActivityEnableContext((void *)0x1, kind); }
int P(disable)(int kind) { return cuptiActivityDisable(kind); }
int P(finalize)(void) { return cuptiFinalize(); }
int P(subscribe)(void **sub) { return cuptiSubscribe(sub, (void *)0x2, (void *)0); }
int P(unsubscribe)(void *sub) { return cuptiUnsubscribe(sub); }
