/* fake_cupti.c - a stand-in libcupti (soname libcupti.so.99) for the guard's CPU tests: records
 * which buffer callbacks are registered and which kinds are enabled; no CUDA. */
#include <stdint.h>

void *fake_requested, *fake_completed;
uint64_t fake_enabled;
int fake_finalized;
void *fake_subscriber; /* CUPTI has one subscriber slot */
static char subscriber_handle;

int cuptiActivityRegisterCallbacks(void *requested, void *completed)
{
    fake_requested = requested;
    fake_completed = completed;
    return 0;
}

int cuptiActivityEnable(int kind)
{
    if (kind == 63)
        return 7; /* the guard must hand CUPTI's answer back unchanged */
    fake_enabled |= (uint64_t)1 << kind;
    return 0;
}

int cuptiActivityDisable(int kind)
{
    fake_enabled &= ~((uint64_t)1 << kind);
    return 0;
}

int cuptiActivityEnableContext(void *ctx, int kind)
{
    (void)ctx;
    return cuptiActivityEnable(kind);
}

int cuptiActivityDisableContext(void *ctx, int kind)
{
    (void)ctx;
    return cuptiActivityDisable(kind);
}

int cuptiSubscribe(void **subscriber, void *callback, void *userdata)
{
    (void)callback;
    (void)userdata;
    if (fake_subscriber)
        return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
    *subscriber = fake_subscriber = &subscriber_handle;
    return 0;
}

int cuptiUnsubscribe(void *subscriber)
{
    if (!subscriber || subscriber != fake_subscriber)
        return 1; /* CUPTI_ERROR_INVALID_PARAMETER */
    fake_subscriber = 0;
    return 0;
}

int cuptiFinalize(void)
{
    fake_subscriber = 0;
    fake_requested = fake_completed = 0;
    fake_enabled = 0;
    fake_finalized++;
    return 0;
}
