/* names.c - an open-addressing table from name text to id, under one mutex (CUPTI's buffer
 * completion path only: never on the application's launch path). */
#define _GNU_SOURCE
#include "names.h"

#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h ? h : 1;
}

void gitm_names_init(struct gitm_names *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->next_id = 1;
}

static int grow(struct gitm_names *t)
{
    size_t cap = t->cap ? t->cap * 2 : 1024;
    struct gitm_name_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].name)
            continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].name)
            j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

uint32_t gitm_names_intern(struct gitm_names *t, const char *name, int *is_new)
{
    *is_new = 0;
    uint64_t h = fnv1a(name);
    uint32_t id = 0;
    pthread_mutex_lock(&t->lock);
    if ((t->count + 1) * 2 > t->cap && grow(t) != 0)
        goto out;
    size_t i = h & (t->cap - 1);
    while (t->slots[i].name) {
        if (t->slots[i].hash == h && strcmp(t->slots[i].name, name) == 0) {
            id = t->slots[i].id;
            goto out;
        }
        i = (i + 1) & (t->cap - 1);
    }
    char *copy = strdup(name);
    if (!copy)
        goto out;
    t->slots[i] = (struct gitm_name_slot){h, copy, t->next_id++};
    t->count++;
    id = t->slots[i].id;
    *is_new = 1;
out:
    pthread_mutex_unlock(&t->lock);
    return id;
}
