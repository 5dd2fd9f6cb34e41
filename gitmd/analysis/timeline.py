"""A window's timeline: per process, every record's times moved from CUPTI's clock to host
realtime through the calibration pairs, so they line up with NVML samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded, WindowResult


def cupti_to_real_offset(pairs: np.ndarray) -> int | None:
    """realtime - cupti, the median over the calibration pairs; None without any pair."""
    if len(pairs) == 0:
        return None
    # Integer median: np.median goes through float64, which cannot hold realtime ns exactly.
    diffs = np.sort(pairs["real_ns"].astype(np.int64) - pairs["cupti_ns"].astype(np.int64))
    mid = len(diffs) // 2
    if len(diffs) % 2:
        return int(diffs[mid])
    return int(diffs[mid - 1]) + (int(diffs[mid]) - int(diffs[mid - 1])) // 2


@dataclass(frozen=True)
class ProcessTimeline:
    pid: int
    offset_ns: int  # add to a CUPTI timestamp to get unix realtime ns
    records: Decoded
    status: str
    ring_drops: int
    cupti_drops: int


@dataclass(frozen=True)
class Timeline:
    job_id: str
    window_id: int
    start_real_ns: int
    end_real_ns: int
    processes: list[ProcessTimeline]
    notes: list[str]

    def count(self, kind: str) -> int:
        return sum(len(getattr(p.records, kind)) for p in self.processes)


def build(window: WindowResult) -> Timeline:
    procs = []
    notes = list(window.notes)
    for pw in window.processes:
        offset = cupti_to_real_offset(pw.clock_pairs)
        if offset is None:
            if pw.records.count:
                notes.append(f"pid {pw.pid}: no clock calibration pair; its records are left out")
            continue
        procs.append(
            ProcessTimeline(
                pw.pid, offset, pw.records, pw.status.status, pw.status.ring_drops, pw.status.cupti_drops
            )
        )
    return Timeline(window.job_id, window.window_id, window.start_real_ns, window.end_real_ns, procs, notes)
