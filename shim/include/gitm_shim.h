/*
 * gitm_shim.h - the ABI shared by the injected shim (C) and gitmd (Python, through cffi).
 *
 * One file per CUDA process, in the job's runtime directory:
 *
 *   offset 0                     struct gitm_ring_header   (written by the shim; `tail` by the daemon)
 *   offset GITM_PAGE_SIZE        struct gitm_control       (written by the daemon; acks by the shim)
 *   offset header.records_offset capacity x struct gitm_record (64 bytes each; capacity a power of two)
 *
 * Producers (CUPTI's buffer thread, API callbacks, the shim's control thread) reserve a slot by
 * CAS on `head`, fill it, then publish it by storing seq = position + 1 with release order. A full
 * ring drops the record and counts it. The daemon reads slots from `tail` while seq == position + 1
 * (acquire), copies them, then advances `tail` (release): a torn or unpublished slot is never read.
 *
 * Everything between GITM_ABI_BEGIN and GITM_ABI_END is parsed by cffi (gitmd/capture/abi.py):
 * plain structs of fixed-width integers, explicit padding, integer #defines only.
 */
#ifndef GITM_SHIM_H
#define GITM_SHIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GITM_ABI_BEGIN */
#define GITM_ABI_VERSION 1
#define GITM_PAGE_SIZE 4096
#define GITM_RECORD_SIZE 64
#define GITM_RING_MAGIC 0x474e49524d544947
#define GITM_CONTROL_MAGIC 0x4c525443244d5447
#define GITM_CLOCK_PAIRS 16
#define GITM_STATUS_REASON_LEN 160
#define GITM_NAME_CHUNK 48
#define GITM_PAYLOAD_MAX 32

/* shim status (gitm_ring_header.status) */
#define GITM_STATUS_INIT 0
#define GITM_STATUS_IDLE 1          /* ready, no window open: CUPTI activity disabled */
#define GITM_STATUS_CAPTURING 2     /* a window is open */
#define GITM_STATUS_STEPPED_ASIDE 3 /* another CUPTI user (a profiler) is present */
#define GITM_STATUS_OFF 4           /* switched itself off after an error: see status_reason */

/* record types (gitm_record.type) */
#define GITM_REC_KERNEL 1
#define GITM_REC_MEMCPY 2
#define GITM_REC_MEMSET 3
#define GITM_REC_SYNC 4
#define GITM_REC_MEMORY 5
#define GITM_REC_NAME 6
#define GITM_REC_PAYLOAD 7
#define GITM_REC_CLOCK 8
#define GITM_REC_WINDOW 9
#define GITM_REC_HOSTSRC 10

/* activity kinds the daemon may ask for (gitm_control.kinds_mask) */
#define GITM_KIND_KERNEL 1
#define GITM_KIND_MEMCPY 2
#define GITM_KIND_MEMSET 4
#define GITM_KIND_SYNC 8
#define GITM_KIND_MEMORY 16
#define GITM_KIND_PAYLOAD 32
/* learn the CUstream behind each stream id seen in kernel launches (first 100 ms of a window;
 * the stream-priority knob needs it) */
#define GITM_KIND_STREAMS 64
/* the host addresses of host-to-device copies of at least GITM_HOSTSRC_MIN_BYTES (API callbacks;
 * joined to MEMCPY records by correlation id: which pageable buffers are hot) */
#define GITM_KIND_HOSTSRC 128
#define GITM_KIND_ALL 255
#define GITM_HOSTSRC_MIN_BYTES 65536

/* memory kinds (memcpy src/dst, memset, memory records): CUPTI's CUpti_ActivityMemoryKind values */
#define GITM_MEM_UNKNOWN 0
#define GITM_MEM_PAGEABLE 1
#define GITM_MEM_PINNED 2
#define GITM_MEM_DEVICE 3
#define GITM_MEM_ARRAY 4
#define GITM_MEM_MANAGED 5
#define GITM_MEM_DEVICE_STATIC 6
#define GITM_MEM_MANAGED_STATIC 7

/* knob operations (gitm_control.knob_op); the levers come later, the channel is here now */
#define GITM_KNOB_NOP 0
#define GITM_KNOB_PING 1
/* args[0] stream id (as in kernel records), args[1] the priority (int64; lower is higher),
 * args[2] 1: only read it. out[0] the priority before, out[1] after, out[2] the CUresult on error.
 * -ENOENT: no launch on that stream was seen while GITM_KIND_STREAMS was on; -ESTALE: the stream
 * behind that handle is gone or has another id now; -ELIBACC: libcuda's functions not found. */
#define GITM_KNOB_STREAM_PRIORITY 2
/* args[0] device ordinal, args[1] release threshold in bytes, args[2] 1: only read it.
 * out[0] the threshold before, out[1] after, out[2] the CUresult on error. */
#define GITM_KNOB_MEMPOOL_RELEASE 3
/* Page-lock a hot pageable source buffer (cuMemHostRegister, portable) so copies from it run at
 * pinned speed. args[0] address, args[1] bytes, args[2] 0 register, 1 unregister, 2 only read.
 * out[0] 1 if the range is registered by the shim after the command, out[1] ranges the program
 * freed or unmapped while registered (released by the guard), out[2] the CUresult on error.
 * Registering needs libgitm_guard.so preloaded (it unregisters a range before the program's
 * free/realloc/munmap/mremap/madvise/mmap(MAP_FIXED) releases it): -ENOTSUP without it.
 * -EFAULT: not one private anonymous read-write mapping; -ENOSPC: the guard's table is full;
 * -ENOENT (unregister): not registered (any more); -EBUSY: no CUDA context seen yet. */
#define GITM_KNOB_HOST_REGISTER 4
/* Yield the GPU: hold this process's kernel launches (driver and runtime launch API callbacks) for
 * args[0] permille (0 off, at most 950) of every args[1] ms (10..1000; 0: 100), until args[2]
 * seconds (1..600) from now unless renewed: a yield nobody renews lifts itself. args[3] 1: only
 * read. out[0] the share before, out[1] after, out[2] ms left. -EBUSY: another CUPTI subscriber
 * holds the slot. For jobs registered as background, to let a foreground job on the same GPU run. */
#define GITM_KNOB_YIELD 5
/* How the process's CUDA context waits in synchronizations: args[0] device ordinal (its primary
 * context, as torch and the runtime use), args[1] a CU_CTX_SCHED_* value (0 auto, 1 spin, 2 yield,
 * 4 blocking sync), args[2] 1: only read. out[0] the scheduling flag before, out[1] after, out[2]
 * the CUresult on error. -ESRCH: the process has no active primary context on that device;
 * -ENOTSUP: the driver has no cuCtxSetFlags (CUDA 12.1); -EINVAL: not a scheduling value. */
#define GITM_KNOB_CTX_SCHED 6
/* A flag that gitmd's framework hooks read inside the job's process (gitmd's sitecustomize, through
 * gitm_shim_flag() below): args[0] the flag (GITM_FLAG_*), args[1] its value, args[2] 1: only read.
 * out[0] the value before, out[1] after, out[2] how many times the process has read the flag (0:
 * no hook in the process consults it, so setting it changes nothing). -EINVAL: no such flag. */
#define GITM_KNOB_FLAG 7
/* The end of the process's observation: CUPTI is finalized once (at the next driver API exit, or
 * once the process is past start-up) and never attached again; later windows are refused. out[0]: 1
 * armed or made, 2 owed (still starting), 0 never (detaching off, or the job's profiler holds CUPTI);
 * out[1]: detaches so far. -EBUSY while a window is open or a yield holds CUPTI. */
#define GITM_KNOB_DETACH 8
/* while set, torch.cuda.empty_cache() keeps PyTorch's cached blocks (lever alloc_keep_cache) */
#define GITM_FLAG_KEEP_CACHE 1
#define GITM_FLAGS 4 /* flags 1 .. GITM_FLAGS - 1 */

struct gitm_clock_pair {
    uint64_t cupti_ns;    /* cuptiGetTimestamp() */
    uint64_t mono_ns;     /* CLOCK_MONOTONIC, read around it (midpoint) */
    uint64_t real_ns;     /* CLOCK_REALTIME */
};

struct gitm_ring_header {
    uint64_t magic;              /* GITM_RING_MAGIC, stored last at creation (release) */
    uint32_t abi_version;
    uint32_t record_size;
    uint64_t capacity;           /* records; power of two */
    uint64_t records_offset;     /* bytes from the start of the file */
    uint64_t file_size;
    int32_t pid;
    uint32_t cupti_version;
    uint64_t start_time_ticks;   /* /proc/<pid>/stat field 22: with pid, names the process */
    uint64_t created_real_ns;
    /* offset 64 */
    uint64_t head;               /* next slot to reserve (shim) */
    uint8_t _pad1[56];
    /* offset 128 */
    uint64_t tail;               /* next slot to read (daemon) */
    uint8_t _pad2[56];
    /* offset 192: counters, written by the shim with atomic adds */
    uint64_t records_written;
    uint64_t ring_drops;         /* ring full */
    uint64_t cupti_drops;        /* cuptiActivityGetNumDroppedRecords */
    uint64_t missing_timestamps; /* records CUPTI delivered with start == end == 0 */
    uint64_t buffers_completed;
    uint64_t windows_opened;
    uint64_t flushes;
    uint64_t names_interned;
    /* offset 256 */
    uint32_t status;             /* GITM_STATUS_* */
    int32_t status_code;         /* the CUPTI/errno code behind status_reason, 0 if none */
    uint32_t window_id;          /* the open window, 0 if none */
    uint32_t clock_pair_count;   /* pairs written so far; slot = count % GITM_CLOCK_PAIRS */
    char status_reason[GITM_STATUS_REASON_LEN];
    /* offset 432 */
    struct gitm_clock_pair clock_pairs[GITM_CLOCK_PAIRS];
    /* offset 816 */
    uint64_t detaches;           /* windows closed with cuptiFinalize (the rest closed disable-only) */
};

struct gitm_control {
    uint64_t magic;              /* GITM_CONTROL_MAGIC, written by the shim at creation */
    uint32_t window_seq;         /* daemon: bump to request the state below */
    uint32_t window_open;        /* daemon: 1 open, 0 closed */
    uint32_t window_id;          /* daemon: id of the window to open */
    uint32_t kinds_mask;         /* daemon: GITM_KIND_* */
    uint32_t window_ack;         /* shim: the window_seq it has applied */
    uint32_t flush_interval_ms;  /* daemon: periodic flush while open (0: 500 ms) */
    uint64_t heartbeat_mono_ns;  /* daemon: CLOCK_MONOTONIC, refreshed while a window is open */
    uint32_t heartbeat_timeout_ms; /* shim closes an open window when the heartbeat is older (0: 10 s) */
    uint32_t knob_seq;           /* daemon: bump to send a knob command */
    uint32_t knob_op;            /* GITM_KNOB_* */
    uint32_t knob_ack;           /* shim: the knob_seq it has handled */
    int32_t knob_result;         /* shim: 0 ok, else a negative errno */
    uint32_t _pad0;
    uint64_t knob_args[4];
    uint64_t knob_out[4];
};

/* Every record: 32 bytes common, 32 bytes of per-type payload. */
struct gitm_record {
    uint64_t seq;                /* position + 1 once published */
    uint8_t type;                /* GITM_REC_* */
    uint8_t flags;
    uint16_t device;
    uint32_t correlation_id;     /* NAME: name id; WINDOW: window id */
    uint64_t start_ns;           /* CUPTI clock */
    uint64_t end_ns;
    uint8_t payload[32];
};

struct gitm_kernel_payload {     /* GITM_REC_KERNEL */
    uint32_t name_id;
    uint32_t stream_id;
    uint32_t grid_x;
    uint16_t grid_y;
    uint16_t grid_z;
    uint16_t block_x;
    uint16_t block_y;
    uint16_t block_z;
    uint16_t registers;
    uint32_t shared_bytes;       /* static + dynamic */
    uint32_t graph_id;
};

struct gitm_memcpy_payload {     /* GITM_REC_MEMCPY; flags bit 0: async */
    uint64_t bytes;
    uint32_t stream_id;
    uint8_t copy_kind;           /* CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP ... */
    uint8_t src_kind;            /* GITM_MEM_* */
    uint8_t dst_kind;
    uint8_t _pad0;
    uint8_t _pad1[16];
};

struct gitm_memset_payload {     /* GITM_REC_MEMSET */
    uint64_t bytes;
    uint32_t stream_id;
    uint32_t value;
    uint8_t mem_kind;
    uint8_t _pad[15];
};

/* GITM_REC_SYNC flags: the record was timed on the host, from the sync call's driver API callbacks
 * (ENTER to EXIT on CUPTI's clock), not by SYNCHRONIZATION activity (which the shim no longer enables:
 * it leaves later launches slower once disabled) */
#define GITM_SYNC_FLAG_CALLBACK 2

struct gitm_sync_payload {       /* GITM_REC_SYNC */
    uint32_t sync_type;          /* CUpti_ActivitySynchronizationType: 1 event sync, 2 stream wait, 3 stream sync, 4 context sync */
    uint32_t stream_id;
    uint32_t context_id;
    uint32_t event_id;
    uint8_t _pad[16];
};

struct gitm_memory_payload {     /* GITM_REC_MEMORY; start_ns = end_ns = timestamp */
    uint64_t address;
    uint64_t bytes;
    uint32_t stream_id;
    uint8_t op;                  /* 1 allocation, 2 release */
    uint8_t mem_kind;
    uint8_t is_async;
    uint8_t _pad[9];
};

#define GITM_PAYLOAD_BYTES 32
#define GITM_PAYLOAD_SYNC_COPY 1     /* device: how the copy was made */
#define GITM_PAYLOAD_ASYNC_COPY 2    /* ... read when a synchronization covering its stream returned */
#define GITM_PAYLOAD_GENERIC_COPY 3  /* cuMemcpy(Async) with a readable host destination */
struct gitm_payload_payload {    /* GITM_REC_PAYLOAD: bytes read from a small device-to-host copy */
    uint8_t data[32];            /* length in flags (<= 32); correlation_id of the copy's API call;
                                  * start_ns: CUPTI time it was read; device: GITM_PAYLOAD_* */
};

struct gitm_clock_payload {      /* GITM_REC_CLOCK: start_ns = cupti_ns, end_ns = mono_ns */
    uint64_t real_ns;
    uint8_t _pad[24];
};

struct gitm_window_payload {     /* GITM_REC_WINDOW: flags 1 open, 2 close; start_ns = mono_ns */
    uint32_t kinds_mask;
    uint32_t _pad0;
    uint64_t cupti_ns;
    uint8_t _pad[16];
};
#define GITM_HOSTSRC_SYNC_API 1   /* a synchronous copy API: the host waits for the copy */
#define GITM_HOSTSRC_SYNCED 2     /* asynchronous, and the thread's next copy or sync call was a sync
                                   * covering its stream: the host waited before going on */
#define GITM_HOSTSRC_GENERIC 4    /* cuMemcpy(Async): the source may be device memory */
struct gitm_hostsrc_payload {    /* GITM_REC_HOSTSRC: correlation_id of the copy's API call;
                                  * flags GITM_HOSTSRC_*; start_ns: CUPTI time at the API's return */
    uint64_t src;
    uint64_t dst;
    uint64_t bytes;
    uint32_t cbid;               /* CUPTI driver callback id of the copy API */
    uint32_t _pad0;
};

/* GITM_REC_NAME: correlation_id = name id, device = chunk index, flags bit 0 = last chunk;
 * start_ns, end_ns and payload hold GITM_NAME_CHUNK bytes of the name, NUL-padded. */
/* GITM_ABI_END */

/* Exported by libgitm_shim.so for hooks in the job's own process (not part of the file's layout):
 * the flag's value as the daemon last set it through GITM_KNOB_FLAG, 0 for an unknown flag. Safe
 * from any thread at any time, before initialisation too; it counts the reads (out[2] above). */
uint64_t gitm_shim_flag(uint32_t flag);

#ifdef __cplusplus
}
#endif

#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct gitm_record) == GITM_RECORD_SIZE, "record size");
_Static_assert(sizeof(struct gitm_kernel_payload) == 32, "kernel payload");
_Static_assert(sizeof(struct gitm_memcpy_payload) == 32, "memcpy payload");
_Static_assert(sizeof(struct gitm_memset_payload) == 32, "memset payload");
_Static_assert(sizeof(struct gitm_sync_payload) == 32, "sync payload");
_Static_assert(sizeof(struct gitm_memory_payload) == 32, "memory payload");
_Static_assert(sizeof(struct gitm_clock_payload) == 32, "clock payload");
_Static_assert(sizeof(struct gitm_window_payload) == 32, "window payload");
_Static_assert(sizeof(struct gitm_hostsrc_payload) == 32, "hostsrc payload");
_Static_assert(sizeof(struct gitm_ring_header) <= GITM_PAGE_SIZE, "header fits a page");
_Static_assert(sizeof(struct gitm_control) <= GITM_PAGE_SIZE, "control fits a page");
_Static_assert(__builtin_offsetof(struct gitm_ring_header, head) == 64, "head on its own line");
_Static_assert(__builtin_offsetof(struct gitm_ring_header, tail) == 128, "tail on its own line");
#endif

#endif /* GITM_SHIM_H */
