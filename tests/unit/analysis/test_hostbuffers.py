from __future__ import annotations

import numpy as np

from gitmd.analysis.hostbuffers import MAX_BUFFERS, SYNC_API, SYNCED, hot_pageable_buffers, to_pin
from gitmd.capture.abi import load
from tests.unit.analysis.test_breakdown import decoded, recs

MB = 1 << 20
A, B, C = 0x7F00_0000_0000, 0x7F10_0000_0000, 0x7F20_0000_0000


def hostsrcs(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(correlation id, src, bytes, flags) per copy API call"""
    a = load()
    out = np.zeros(len(rows), dtype=a.payloads[a.const("GITM_REC_HOSTSRC")])
    for i, (corr, src, n, flags) in enumerate(rows):
        out[i]["correlation_id"], out[i]["src"], out[i]["bytes"], out[i]["flags"] = corr, src, n, flags
    return out


def copies(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(correlation id, start, end, src kind) per HtoD memcpy record"""
    m = recs("memcpys", [(s, e) for _, s, e, _ in rows], copy_kind=1, dst_kind=3, bytes=64 * MB)
    m["correlation_id"] = [c for c, *_ in rows]
    m["src_kind"] = [k for *_, k in rows]
    return m


def test_buffers_copied_again_and_again_are_found_costliest_first() -> None:
    # A: copied 3 times pageable, synchronously; B: twice, async then synced, slower each;
    # C: once (not hot); a pinned copy from A's address (not pageable): not counted
    m = copies([(1, 0, 5000, 1), (2, 10_000, 15_000, 1), (3, 20_000, 25_000, 1), (4, 30_000, 40_000, 1),
                (5, 50_000, 60_000, 1), (6, 70_000, 80_000, 1), (7, 90_000, 91_000, 2)])  # fmt: skip
    h = hostsrcs([(1, A, 64 * MB, SYNC_API), (2, A, 64 * MB, SYNC_API), (3, A, 64 * MB, SYNC_API),
                  (4, B, 64 * MB, SYNCED), (5, B, 64 * MB, SYNCED), (6, C, 64 * MB, SYNC_API),
                  (7, A, 64 * MB, SYNC_API)])  # fmt: skip
    d = decoded(memcpys=m)
    d.hostsrcs = h
    hot = hot_pageable_buffers(d)
    assert [(b.address, b.copies, b.pageable_ns, b.waited) for b in hot] == [
        (B, 2, 20_000, True),
        (A, 3, 15_000, True),
    ]
    assert to_pin(hot) == hot


def test_a_buffer_the_host_did_not_wait_for_is_not_pinned() -> None:
    m = copies([(1, 0, 5000, 1), (2, 10_000, 15_000, 1), (3, 20_000, 30_000, 1), (4, 40_000, 50_000, 1)])
    # A: the second async copy was followed by another copy, not a sync (flags 0): not pinnable
    h = hostsrcs([(1, A, 64 * MB, SYNCED), (2, A, 64 * MB, 0), (3, B, MB, SYNCED), (4, B, MB, SYNCED)])
    d = decoded(memcpys=m)
    d.hostsrcs = h
    hot = hot_pageable_buffers(d)
    assert {b.address: b.waited for b in hot} == {A: False, B: True}
    assert [b.address for b in to_pin(hot)] == [B]


def test_records_without_their_other_half_and_empty_windows() -> None:
    d = decoded(memcpys=copies([(1, 0, 5000, 1), (2, 6000, 9000, 1)]))
    assert hot_pageable_buffers(d) == []  # no host addresses (an older shim, or the kind off)
    d.hostsrcs = hostsrcs([(8, A, MB, SYNC_API), (9, A, MB, SYNC_API)])
    assert hot_pageable_buffers(d) == []  # no memcpy records of those calls
    assert hot_pageable_buffers(decoded()) == []


def test_to_pin_bounds_count_overlap_and_size() -> None:
    from gitmd.analysis.hostbuffers import HotBuffer

    many = [HotBuffer(A + i * 128 * MB, 64 * MB, 2, 1000 - i, True) for i in range(MAX_BUFFERS + 4)]
    assert len(to_pin(many)) == MAX_BUFFERS
    overlapping = [HotBuffer(A, 64 * MB, 2, 10, True), HotBuffer(A + MB, 64 * MB, 2, 5, True)]
    assert [b.address for b in to_pin(overlapping)] == [A]
    huge = [HotBuffer(A, 16 << 30, 2, 10, True), HotBuffer(B, MB, 2, 5, True)]
    assert [b.address for b in to_pin(huge)] == [B]
