/*
 * ring_writer.c - writes a ring the way the shim does, without CUPTI, for the daemon's decoder
 * tests and benchmarks:  ring_writer DIR RECORDS CAPACITY [THREADS]
 * Writes interned names, then kernels, copies (pageable and pinned), memsets, syncs, allocations,
 * a clock pair and window markers, with values derived from the index so a reader can check them.
 * Prints the ring's path.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/ring.h"

static struct gitm_ring ring;

static void emit_name(uint32_t id, const char *name)
{
    size_t len = strlen(name);
    uint16_t chunk = 0;
    for (size_t off = 0; off == 0 || off < len; off += GITM_NAME_CHUNK, chunk++) {
        uint64_t pos;
        struct gitm_record *rec = gitm_ring_reserve(&ring, &pos);
        if (!rec)
            return;
        rec->type = GITM_REC_NAME;
        rec->correlation_id = id;
        rec->device = chunk;
        rec->flags = off + GITM_NAME_CHUNK >= len ? 1 : 0;
        char *text = (char *)&rec->start_ns;
        memset(text, 0, GITM_NAME_CHUNK);
        memcpy(text, name + off, len - off < GITM_NAME_CHUNK ? len - off : GITM_NAME_CHUNK);
        gitm_ring_publish(rec, pos);
    }
}

static void emit(uint64_t i)
{
    uint64_t pos;
    struct gitm_record *rec = gitm_ring_reserve(&ring, &pos);
    if (!rec)
        return;
    memset((char *)rec + 8, 0, GITM_RECORD_SIZE - 8);
    rec->device = (uint16_t)(i % 2);
    rec->correlation_id = (uint32_t)i;
    rec->start_ns = 1000000 + i * 1000;
    rec->end_ns = rec->start_ns + 500 + (i % 7);
    switch (i % 6) {
    case 0:
    case 1: {
        rec->type = GITM_REC_KERNEL;
        struct gitm_kernel_payload *k = (void *)rec->payload;
        k->name_id = (uint32_t)(i % 3) + 1;
        k->stream_id = 7 + (uint32_t)(i % 2);
        k->grid_x = (uint32_t)(i % 1000) + 1;
        k->grid_y = 1;
        k->grid_z = 1;
        k->block_x = 256;
        k->block_y = 1;
        k->block_z = 1;
        break;
    }
    case 2: {
        rec->type = GITM_REC_MEMCPY;
        struct gitm_memcpy_payload *m = (void *)rec->payload;
        m->bytes = 4096 * (i % 5 + 1);
        m->stream_id = 7;
        m->copy_kind = 1;
        m->src_kind = (i % 4 == 0) ? GITM_MEM_PAGEABLE : GITM_MEM_PINNED;
        m->dst_kind = GITM_MEM_DEVICE;
        break;
    }
    case 3: {
        rec->type = GITM_REC_MEMSET;
        struct gitm_memset_payload *m = (void *)rec->payload;
        m->bytes = 1 << 20;
        m->stream_id = 8;
        m->mem_kind = GITM_MEM_DEVICE;
        break;
    }
    case 4: {
        rec->type = GITM_REC_SYNC;
        struct gitm_sync_payload *s = (void *)rec->payload;
        s->sync_type = 3;
        s->stream_id = 7;
        break;
    }
    default: {
        rec->type = GITM_REC_MEMORY;
        struct gitm_memory_payload *m = (void *)rec->payload;
        m->address = 0x7f0000000000ULL + i * 4096;
        m->bytes = 1 << 21;
        m->op = (i % 12 == 5) ? 1 : 2;
        m->mem_kind = GITM_MEM_DEVICE;
        rec->end_ns = rec->start_ns;
        break;
    }
    }
    gitm_ring_publish(rec, pos);
}

struct arg {
    uint64_t from, to;
};

static void *worker(void *p)
{
    struct arg *a = p;
    for (uint64_t i = a->from; i < a->to; i++)
        emit(i);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIR RECORDS CAPACITY [THREADS]\n", argv[0]);
        return 2;
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    uint64_t cap = strtoull(argv[3], NULL, 10);
    int threads = argc > 4 ? atoi(argv[4]) : 1;
    char err[256];
    if (gitm_ring_create(&ring, argv[1], cap, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    emit_name(1, "_Z10vector_addPKfS0_Pfi");
    emit_name(2, "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
                 "at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, "
                 "at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, {lambda(int)#1})");
    emit_name(3, "ampere_sgemm_128x64_tn");
    {
        uint64_t pos;
        struct gitm_record *rec = gitm_ring_reserve(&ring, &pos);
        rec->type = GITM_REC_CLOCK;
        rec->start_ns = 1000000;            /* cupti */
        rec->end_ns = 5000000000ULL;        /* monotonic */
        ((struct gitm_clock_payload *)rec->payload)->real_ns = 1796000000000000000ULL;
        gitm_ring_publish(rec, pos);
        ring.hdr->clock_pairs[0] = (struct gitm_clock_pair){1000000, 5000000000ULL, 1796000000000000000ULL};
        ring.hdr->clock_pair_count = 1;
    }
    pthread_t t[64];
    struct arg a[64];
    if (threads < 1 || threads > 64)
        threads = 1;
    for (int i = 0; i < threads; i++) {
        a[i] = (struct arg){n * i / threads, n * (i + 1) / threads};
        pthread_create(&t[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    gitm_ring_set_status(&ring, GITM_STATUS_IDLE, 0, "ring_writer");
    printf("%s\n", ring.path);
    gitm_ring_unmap(&ring);
    return 0;
}
