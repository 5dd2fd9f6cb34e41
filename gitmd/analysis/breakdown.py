"""Where a window's time went, per process: a breakdown that sums to the window.

GPU time is the union of the process's kernels, copies and memsets. GPU-idle time is split by what
the host was doing just before the GPU went idle: an idle gap that starts as a synchronization
returns is a sync stall (the pipeline drained and had to refill), one that starts at an allocation
or free is allocator time, and the rest are launch gaps (the GPU waiting for the host to issue work).
Pageable copies are also costed against pinned bandwidth: what registering the buffer would save.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.capture.decode import Decoded

PAGEABLE = 1
GAP_CAUSE_WINDOW_NS = 20_000  # an idle gap "follows" an event ending within 20 µs before it
DEFAULT_PINNED_BYTES_PER_S = 54.9e9  # H200 HtoD from pinned memory, shared/GPU.md; the capture's own wins


@dataclass(frozen=True)
class Breakdown:
    window_ns: int
    kernels_ns: int  # GPU busy with kernels (union)
    copies_ns: int  # GPU busy with copies and memsets only (no kernel at the same time)
    sync_stall_ns: int  # GPU idle right after a synchronization returned
    allocator_ns: int  # GPU idle right after an allocation or free
    launch_gap_ns: int  # GPU idle otherwise: waiting for the host to issue work
    pageable_copies: int
    pageable_bytes: int
    pageable_ns: int
    pageable_saving_ns: int  # if those copies ran at pinned bandwidth
    pinned_bytes_per_s: float
    alloc_count: int
    free_count: int
    sync_count: int
    kernels: int

    def shares(self) -> dict[str, float]:
        w = float(self.window_ns) or 1.0
        return {
            "kernels": self.kernels_ns / w,
            "copies": self.copies_ns / w,
            "sync_stall": self.sync_stall_ns / w,
            "allocator": self.allocator_ns / w,
            "launch_gaps": self.launch_gap_ns / w,
        }


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, sorted and disjoint."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _total(starts: np.ndarray, ends: np.ndarray) -> int:
    return int((ends - starts).sum())


def _preceded_by(gap_starts: np.ndarray, event_ends: np.ndarray) -> np.ndarray:
    """For each gap, whether some event ended within GAP_CAUSE_WINDOW_NS before (or at) its start."""
    if len(event_ends) == 0 or len(gap_starts) == 0:
        return np.zeros(len(gap_starts), dtype=bool)
    ends = np.sort(event_ends)
    i = np.searchsorted(ends, gap_starts + GAP_CAUSE_WINDOW_NS, side="right") - 1
    ok = i >= 0
    near = np.zeros(len(gap_starts), dtype=bool)
    near[ok] = ends[i[ok]] >= gap_starts[ok] - GAP_CAUSE_WINDOW_NS
    return near


def breakdown(r: Decoded, window: tuple[int, int] | None = None) -> Breakdown:
    """The breakdown of one process's records (CUPTI clock). ``window``: its bounds, else the span
    of the records."""
    k, m, s = r.kernels, r.memcpys, r.memsets
    ks, ke = k["start_ns"].astype(np.int64), k["end_ns"].astype(np.int64)
    cs = np.concatenate([m["start_ns"], s["start_ns"]]).astype(np.int64)
    ce = np.concatenate([m["end_ns"], s["end_ns"]]).astype(np.int64)
    all_s, all_e = np.concatenate([ks, cs]), np.concatenate([ke, ce])
    if window is None:
        everything = [
            a
            for a in (all_s, r.syncs["start_ns"].astype(np.int64), r.memory["start_ns"].astype(np.int64))
            if len(a)
        ]
        ends = [a for a in (all_e, r.syncs["end_ns"].astype(np.int64)) if len(a)]
        lo = int(min(a.min() for a in everything)) if everything else 0
        hi = int(max(a.max() for a in ends)) if ends else lo
    else:
        lo, hi = window
    span = max(0, hi - lo)
    kb_s, kb_e = _merge(np.clip(ks, lo, hi), np.clip(ke, lo, hi))
    busy_s, busy_e = _merge(np.clip(all_s, lo, hi), np.clip(all_e, lo, hi))
    kernels_ns = _total(kb_s, kb_e)
    busy_ns = _total(busy_s, busy_e)
    # idle gaps: between busy intervals, and before the first / after the last
    gap_s = np.concatenate([[lo], busy_e]) if len(busy_s) else np.array([lo])
    gap_e = np.concatenate([busy_s, [hi]]) if len(busy_s) else np.array([hi])
    keep = gap_e > gap_s
    gap_s, gap_e = gap_s[keep], gap_e[keep]
    gap_len = gap_e - gap_s
    after_sync = _preceded_by(gap_s, r.syncs["end_ns"].astype(np.int64))
    after_alloc = _preceded_by(gap_s, r.memory["end_ns"].astype(np.int64)) & ~after_sync
    sync_ns = int(gap_len[after_sync].sum())
    alloc_ns = int(gap_len[after_alloc].sum())
    launch_ns = int(gap_len[~after_sync & ~after_alloc].sum())

    pageable = (m["src_kind"] == PAGEABLE) | (m["dst_kind"] == PAGEABLE)
    p_bytes = int(m["bytes"][pageable].sum())
    p_ns = int((m["end_ns"][pageable].astype(np.int64) - m["start_ns"][pageable].astype(np.int64)).sum())
    pinned = ~pageable & (m["bytes"] >= 1 << 20)
    pin_ns = (m["end_ns"][pinned].astype(np.int64) - m["start_ns"][pinned].astype(np.int64)).sum()
    pinned_bw = float(m["bytes"][pinned].sum()) / (pin_ns / 1e9) if pin_ns > 0 else DEFAULT_PINNED_BYTES_PER_S
    saving = max(0, p_ns - round(p_bytes / pinned_bw * 1e9))
    return Breakdown(
        window_ns=span,
        kernels_ns=kernels_ns,
        copies_ns=busy_ns - kernels_ns,
        sync_stall_ns=sync_ns,
        allocator_ns=alloc_ns,
        launch_gap_ns=launch_ns,
        pageable_copies=int(pageable.sum()),
        pageable_bytes=p_bytes,
        pageable_ns=p_ns,
        pageable_saving_ns=saving,
        pinned_bytes_per_s=pinned_bw,
        alloc_count=int((r.memory["op"] == 1).sum()),
        free_count=int((r.memory["op"] == 2).sum()),
        sync_count=len(r.syncs),
        kernels=len(k),
    )
