/* names.h - kernel name interning: each distinct name gets a small id, sent once as NAME records. */
#ifndef GITM_NAMES_H
#define GITM_NAMES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct gitm_name_slot {
    uint64_t hash;
    char *name;
    uint32_t id;
};

struct gitm_names {
    pthread_mutex_t lock;
    struct gitm_name_slot *slots;
    size_t cap;   /* power of two */
    size_t count;
    uint32_t next_id;
};

void gitm_names_init(struct gitm_names *t);
/* The id of `name` (content, not pointer); *is_new set when this call created it. Ids start at 1.
 * On allocation failure returns 0 (the "unknown name" id), never crashes. */
uint32_t gitm_names_intern(struct gitm_names *t, const char *name, int *is_new);

#endif
