"""Where a window's time went, per process: a breakdown that sums to the window.

GPU time is the union of the process's kernels, copies and memsets. GPU-idle time is split by what
the host was doing when the GPU went idle: a gap that starts while the host is blocked in a
synchronization (or within GAP_CAUSE_WINDOW_NS of it returning) is a sync stall — the pipeline
drained and had to be refilled —, one that starts inside or right after an allocation or free is
allocator time, and the rest are launch gaps (the GPU waiting for the host to issue work).
Pageable copies are also costed against pinned bandwidth: what registering the buffer would save.

Collectives (NCCL's kernels, by name) are GPU time of their own: the part of them no other kernel
runs beside is exposed communication ("communication"), the rest is hidden under compute and kept
only as a figure (``overlapped_comm_ns``). A job on one GPU has none: its breakdown is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded

PAGEABLE = 1
GAP_CAUSE_WINDOW_NS = 20_000  # an idle gap "follows" an event ending within 20 µs before it
DEFAULT_PINNED_BYTES_PER_S = 54.9e9  # H200 HtoD from pinned memory, shared/GPU.md; the capture's own wins
# a collective's kernel: NCCL's (ncclDevKernel_AllReduce_Sum_f32_RING_LL from 2.19 on, ncclKernel_*
# before; RCCL keeps the names) and MSCCL's
COLLECTIVE = re.compile(r"^(nccl|msccl)[A-Z_]")


@dataclass(frozen=True)
class Breakdown:
    window_ns: int
    kernels_ns: int  # GPU busy with kernels other than collectives (union)
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
    syncing_frees: int  # frees the GPU went idle at (cudaFree waits for the device)
    sync_count: int
    kernels: int
    communication_ns: int = 0  # GPU busy with collectives only (exposed: no other kernel beside them)
    overlapped_comm_ns: int = 0  # collectives' time hidden under other kernels
    collectives: int = 0

    def shares(self) -> dict[str, float]:
        w = float(self.window_ns) or 1.0
        return {
            "kernels": self.kernels_ns / w,
            "copies": self.copies_ns / w,
            "communication": self.communication_ns / w,
            "sync_stall": self.sync_stall_ns / w,
            "allocator": self.allocator_ns / w,
            "launch_gaps": self.launch_gap_ns / w,
        }


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, sorted and disjoint (int64)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
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


def _during(gap_starts: np.ndarray, ev_starts: np.ndarray, ev_ends: np.ndarray) -> np.ndarray:
    """For each gap, whether it started inside a host event (start .. end + GAP_CAUSE_WINDOW_NS),
    or within GAP_CAUSE_WINDOW_NS before one."""
    if len(ev_starts) == 0 or len(gap_starts) == 0:
        return np.zeros(len(gap_starts), dtype=bool)
    order = np.argsort(ev_starts, kind="stable")
    s = ev_starts[order] - GAP_CAUSE_WINDOW_NS
    e = np.maximum.accumulate(np.maximum(ev_ends[order], ev_starts[order])) + GAP_CAUSE_WINDOW_NS
    i = np.searchsorted(s, gap_starts, side="right") - 1
    ok = i >= 0
    inside = np.zeros(len(gap_starts), dtype=bool)
    inside[ok] = e[i[ok]] >= gap_starts[ok]
    return inside


def _refill(gap_s: np.ndarray, gap_len: np.ndarray, taken: np.ndarray, syncs: np.ndarray) -> np.ndarray:
    """Gaps of the refill after each synchronization: the host, blocked in the sync for its whole
    duration, could have issued the next work then; so the idle gaps between a sync's return and
    the next sync are the sync's, up to the time the host spent blocked in it (the rest, if any,
    are launch gaps: a host that is slower than the GPU even when it never waits)."""
    out = np.zeros(len(gap_s), dtype=bool)
    if len(syncs) == 0 or len(gap_s) == 0:
        return out
    order = np.argsort(syncs["end_ns"], kind="stable")
    ends = syncs["end_ns"].astype(np.int64)[order]
    budget = (ends - syncs["start_ns"].astype(np.int64)[order]).clip(0)
    k = np.searchsorted(ends, gap_s, side="right") - 1  # the last sync that returned before the gap
    cand = np.flatnonzero((k >= 0) & ~taken)
    if not len(cand):
        return out
    group = k[cand]
    length = gap_len[cand]
    # gap time already used of each sync's budget, before this gap (gaps come in time order)
    csum = np.cumsum(length)
    first = np.r_[True, group[1:] != group[:-1]]
    start_of_group = np.maximum.accumulate(np.where(first, np.arange(len(cand)), 0))
    before = csum - length - (csum[start_of_group] - length[start_of_group])
    out[cand] = before + length <= budget[group]
    return out


def _idle_at(times: np.ndarray, gap_starts: np.ndarray) -> int:
    """How many of these host events the GPU went idle at (a gap starting within the window of it)."""
    if len(times) == 0 or len(gap_starts) == 0:
        return 0
    g = np.sort(gap_starts)
    lo = np.searchsorted(g, times - GAP_CAUSE_WINDOW_NS, side="left")
    hi = np.searchsorted(g, times + GAP_CAUSE_WINDOW_NS, side="right")
    return int((hi > lo).sum())


def _observed_from(lo: int, gpu_starts: np.ndarray) -> int:
    """Where the window's view of the GPU begins: at its first recorded GPU work. A window records
    the work launched while it is open, not the work queued before it, which the GPU may still be
    running when the window opens; so until the first recorded kernel or copy starts, whether the
    GPU was idle is not known, and that time is left out rather than counted as idle. Counted, the
    wait of a job that queues many steps and then synchronizes reads as a sync stall (or, blocked in
    a launch on a full queue, as a launch gap) of a GPU that was in fact busy — as the bf16 control's
    windows read a 56% sync stall and an fp32 MLP's first run 88% launch-bound on the H200,
    2026-12-03 (those windows were not kept, so that this was their cause is not shown)."""
    return max(lo, int(gpu_starts.min())) if len(gpu_starts) else lo


def opened_at(r: Decoded) -> int | None:
    """When the window was opened (its open marker, CUPTI clock), or None without one. A record
    that began before it is not the window's (a kernel 3.1 s older was delivered with a window on
    the H200, 2026-12-04: steps.steady_span)."""
    w = r.windows
    if not len(w) or "cupti_ns" not in (w.dtype.names or ()):
        return None
    opened = w["cupti_ns"][(w["flags"] == 1) & (w["cupti_ns"] > 0)]
    return int(opened.max()) if len(opened) else None


def collectives(r: Decoded) -> np.ndarray:
    """Which of the process's kernels are collectives (COLLECTIVE, by name)."""
    ids = r.kernels["name_id"]
    if not len(ids) or not r.names:
        return np.zeros(len(ids), dtype=bool)
    hit = [i for i, n in r.names.items() if COLLECTIVE.match(n)]
    if not hit:
        return np.zeros(len(ids), dtype=bool)
    return np.isin(ids, np.asarray(hit, dtype=ids.dtype))


def breakdown(r: Decoded, window: tuple[int, int] | None = None) -> Breakdown:
    """The breakdown of one process's records (CUPTI clock). ``window``: its bounds (a window's
    recorded run of steps, steps.steady_span), else the span of the records (report.analysed gives
    it the window's own: from its open marker on)."""
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
    lo = _observed_from(lo, all_s)
    span = max(0, hi - lo)
    comm = collectives(r)
    kb_s, kb_e = merge_intervals(np.clip(ks, lo, hi), np.clip(ke, lo, hi))  # every kernel
    busy_s, busy_e = merge_intervals(np.clip(all_s, lo, hi), np.clip(all_e, lo, hi))
    all_kernels_ns = kernels_ns = _total(kb_s, kb_e)
    comm_ns = 0
    if comm.any():  # a distributed job's: compute and collectives apart
        kernels_ns = _total(*merge_intervals(np.clip(ks[~comm], lo, hi), np.clip(ke[~comm], lo, hi)))
        comm_ns = _total(*merge_intervals(np.clip(ks[comm], lo, hi), np.clip(ke[comm], lo, hi)))
    exposed_ns = all_kernels_ns - kernels_ns  # collectives with no other kernel beside them
    busy_ns = _total(busy_s, busy_e)
    # idle gaps: between busy intervals, and before the first / after the last
    gap_s = np.concatenate([[lo], busy_e]) if len(busy_s) else np.array([lo])
    gap_e = np.concatenate([busy_s, [hi]]) if len(busy_s) else np.array([hi])
    keep = gap_e > gap_s
    gap_s, gap_e = gap_s[keep], gap_e[keep]
    gap_len = gap_e - gap_s
    sy, me = r.syncs, r.memory
    after_sync = _during(gap_s, sy["start_ns"].astype(np.int64), sy["end_ns"].astype(np.int64))
    after_alloc = _during(gap_s, me["start_ns"].astype(np.int64), me["end_ns"].astype(np.int64)) & ~after_sync
    after_sync = after_sync | _refill(gap_s, gap_len, after_sync | after_alloc, sy)
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
        copies_ns=busy_ns - all_kernels_ns,
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
        syncing_frees=_idle_at(r.memory["start_ns"][r.memory["op"] == 2].astype(np.int64), gap_s),
        sync_count=len(r.syncs),
        kernels=len(k),
        communication_ns=exposed_ns,
        overlapped_comm_ns=comm_ns - exposed_ns,
        collectives=int(comm.sum()),
    )
