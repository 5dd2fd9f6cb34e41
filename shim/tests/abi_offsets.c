/* abi_offsets.c - prints the C compiler's sizes and offsets of the ABI structs as JSON, so the
 * daemon's tests can check that cffi + numpy see exactly the same layout. */
#include <stddef.h>
#include <stdio.h>

#include "gitm_shim.h"

#define F(s, f) printf("  \"%s.%s\": %zu,\n", #s, #f, offsetof(struct s, f))
#define S(s) printf("  \"sizeof %s\": %zu,\n", #s, sizeof(struct s))

int main(void)
{
    printf("{\n");
    S(gitm_ring_header);
    S(gitm_control);
    S(gitm_record);
    F(gitm_ring_header, head);
    F(gitm_ring_header, tail);
    F(gitm_ring_header, records_written);
    F(gitm_ring_header, ring_drops);
    F(gitm_ring_header, status);
    F(gitm_ring_header, status_reason);
    F(gitm_ring_header, clock_pairs);
    F(gitm_ring_header, detaches);
    F(gitm_control, window_seq);
    F(gitm_control, heartbeat_mono_ns);
    F(gitm_control, knob_seq);
    F(gitm_control, knob_args);
    F(gitm_control, knob_out);
    F(gitm_record, type);
    F(gitm_record, correlation_id);
    F(gitm_record, start_ns);
    F(gitm_record, payload);
    F(gitm_kernel_payload, grid_y);
    F(gitm_kernel_payload, shared_bytes);
    F(gitm_memcpy_payload, src_kind);
    F(gitm_memory_payload, op);
    F(gitm_window_payload, cupti_ns);
    F(gitm_hostsrc_payload, bytes);
    F(gitm_hostsrc_payload, cbid);
    printf("  \"end\": 0\n}\n");
    return 0;
}
