"""Hot pageable source buffers: which host ranges a process copies to the device again and again
from pageable memory — what the ``pin_host_buffer`` lever page-locks.

The shim reports the host address of each host-to-device copy API call (GITM_REC_HOSTSRC, with the
API's correlation id); CUPTI's memcpy record of the same correlation id says whether the source was
pageable and how long the copy took. A buffer is eligible only when the host waited for every copy
from it (a synchronous API, or an asynchronous one the thread synchronized right after): page-locked,
an asynchronous copy really runs asynchronously, and a program that rewrote the buffer before
waiting would change what the device reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded

PAGEABLE = 1
HTOD = 1
SYNC_API, SYNCED = 1, 2  # GITM_HOSTSRC_* flags
MAX_BUFFERS = 8  # the guard holds 16 ranges; leave room
MAX_BYTES = 8 << 30  # never page-lock more than this for one process
MIN_COPIES = 2  # copied at least twice in the window: a buffer reused every step


@dataclass(frozen=True)
class HotBuffer:
    address: int
    bytes: int
    copies: int
    pageable_ns: int  # time its copies took in the window
    waited: bool  # the host waited for every copy from it


def hot_pageable_buffers(r: Decoded) -> list[HotBuffer]:
    """Every host range copied from pageable memory more than once in the window, the costliest
    first."""
    h, m = r.hostsrcs, r.memcpys
    if not len(h) or not len(m):
        return []
    pageable = m[(m["copy_kind"] == HTOD) & (m["src_kind"] == PAGEABLE)]
    if not len(pageable):
        return []
    order = np.argsort(pageable["correlation_id"], kind="stable")
    corr = pageable["correlation_id"][order]
    at = np.searchsorted(corr, h["correlation_id"])
    at = np.minimum(at, len(corr) - 1)
    joined = corr[at] == h["correlation_id"]
    if not joined.any():
        return []
    hs = h[joined]
    ms = pageable[order][at[joined]]
    dur = ms["end_ns"].astype(np.int64) - ms["start_ns"].astype(np.int64)
    waited = (hs["flags"] & (SYNC_API | SYNCED)) != 0
    keys = np.stack([hs["src"].astype(np.uint64), hs["bytes"].astype(np.uint64)], axis=1)
    uniq, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    ns = np.bincount(inverse, weights=np.maximum(dur, 0), minlength=len(uniq))
    all_waited = np.bincount(inverse, weights=~waited, minlength=len(uniq)) == 0
    out = [
        HotBuffer(int(uniq[i, 0]), int(uniq[i, 1]), int(counts[i]), int(ns[i]), bool(all_waited[i]))
        for i in range(len(uniq))
        if counts[i] >= MIN_COPIES
    ]
    out.sort(key=lambda b: -b.pageable_ns)
    return out


def to_pin(buffers: list[HotBuffer]) -> list[HotBuffer]:
    """The buffers the lever may page-lock: waited for, not overlapping one another, at most
    MAX_BUFFERS and MAX_BYTES together, the costliest first."""
    chosen: list[HotBuffer] = []
    total = 0
    for b in buffers:
        if not b.waited or len(chosen) == MAX_BUFFERS or total + b.bytes > MAX_BYTES:
            continue
        if any(b.address < c.address + c.bytes and c.address < b.address + b.bytes for c in chosen):
            continue
        chosen.append(b)
        total += b.bytes
    return chosen
