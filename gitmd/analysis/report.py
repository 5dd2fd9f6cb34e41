"""The attribution report of one window: per process, the time breakdown, the step, the top
kernels, pageable copies and allocator activity. One builder for the daemon (GetAttribution) and
for offline capture files (gitmctl explain --capture)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.analysis.breakdown import Breakdown, breakdown
from gitmd.analysis.steps import StepStats, detect
from gitmd.capture.decode import Decoded
from gitmd.capture.windows import WindowResult

CLASSES = ("kernels", "copies", "launch_gaps", "sync_stall", "allocator")


@dataclass(frozen=True)
class KernelTime:
    name: str
    count: int
    total_ns: float
    share: float


@dataclass(frozen=True)
class ProcessReport:
    pid: int
    breakdown: Breakdown
    step: StepStats
    top_kernels: list[KernelTime]


@dataclass(frozen=True)
class WindowReport:
    job_id: str
    window_id: int
    processes: list[ProcessReport]
    notes: list[str]


def top_kernels(r: Decoded, n: int) -> list[KernelTime]:
    k = r.kernels
    if not len(k):
        return []
    dur = (k["end_ns"].astype(np.int64) - k["start_ns"].astype(np.int64)).astype(np.float64)
    ids, inverse = np.unique(k["name_id"], return_inverse=True)
    totals = np.bincount(inverse, weights=dur)
    counts = np.bincount(inverse)
    total = float(dur.sum()) or 1.0
    return [
        KernelTime(
            r.names.get(int(ids[i]), f"kernel#{int(ids[i])}"),
            int(counts[i]),
            float(totals[i]),
            float(totals[i]) / total,
        )
        for i in np.argsort(-totals)[:n]
    ]


def window_report(w: WindowResult, top: int = 8) -> WindowReport:
    procs = []
    for p in w.processes:
        r = p.records
        if not (len(r.kernels) or len(r.memcpys)):
            continue
        procs.append(
            ProcessReport(
                p.pid, breakdown(r), detect(r.kernels["name_id"], r.kernels["start_ns"]), top_kernels(r, top)
            )
        )
    return WindowReport(w.job_id, w.window_id, procs, list(w.notes))
