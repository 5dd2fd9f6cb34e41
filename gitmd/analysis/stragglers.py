"""The ranks of a distributed job that step together in a window, and the one the others wait for.

A data-parallel job's ranks run the same step and meet in its collectives, so each rank's step
lasts as long as the slowest rank's: the others wait, inside the collectives (NCCL's kernels spin on
the GPU until every peer has arrived: exposed communication) or blocked in a synchronization. What a
rank spends outside that waiting is its own time per step — its kernels, its copies, the gaps its
host leaves between launches. The straggler is the rank whose own time per step is the longest,
when it is longer than the other ranks' median by at least THRESHOLD of the step: that difference
is what every other rank waits for, each step. Why is the part of its own time that differs most:
its kernels (a slower GPU: its clocks, a co-tenant; or more work on that rank), its launch gaps (its
host threads: CPU contention, or its input pipeline feeding it late) or its copies (its input).

Ranks are the processes of one window whose steps were found with the same number of kernels (one
program). With a backend that communicates on the host (gloo) a rank's wait inside a collective is
host time, counted as its launch gaps; a wait in a synchronization after it is still told apart. Two
gloo ranks sharing the H200 (tests/gpu/test_ranks.py, 2026-12-04): 2.75-ms steps, rank 0 (the root
of the step's broadcast) 0.28 ms a step longer in launch gaps, the other rank waiting 0.28 ms more in
its syncs.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gitmd.analysis.breakdown import Breakdown
from gitmd.analysis.causes import THRESHOLD
from gitmd.analysis.steps import StepStats, steady_span


class _Stepping(Protocol):  # report.ProcessReport (kept apart: report imports this module)
    @property
    def pid(self) -> int: ...
    @property
    def breakdown(self) -> Breakdown: ...
    @property
    def step(self) -> StepStats: ...


@dataclass(frozen=True)
class RankStep:
    """One rank's step in the window, and where its time per step went (ms)."""

    pid: int
    step_ms: float  # mean over its recorded run of steps
    compute_ms: float  # its kernels, collectives apart
    communication_ms: float  # collectives with no other kernel beside them (waiting included)
    copies_ms: float
    launch_gap_ms: float
    sync_ms: float  # GPU idle after a synchronization or an allocation (waiting on the host)

    @property
    def own_ms(self) -> float:
        """Its time per step outside waiting for its peers."""
        return max(0.0, self.step_ms - self.communication_ms - self.sync_ms)


@dataclass(frozen=True)
class Straggler:
    pid: int
    lag_ms: float  # its own time per step beyond the other ranks' median: what they wait, each step
    share: float  # of the step
    why: str
    # step by step: the collectives it reached last of all ranks, of those all ranks ran in the
    # window (0 of 0: none seen, a backend that communicates on the host)
    last_arrivals: int = 0
    collectives: int = 0


def last_arrivals(collectives: dict[int, np.ndarray]) -> tuple[dict[int, int], int]:
    """Step by step, which rank reached each collective last: for each rank (pid: its collective
    kernels' (start, end) times, CUPTI clock), how many of the collectives that every rank ran it
    started last — the rank the others waited for there — and how many were compared. One
    collective on different ranks is matched by its end: a collective ends on every rank together,
    once the last rank's data is in (it starts when each rank reaches it); a match is two ends closer
    than a tenth of the spacing between the collectives."""
    pids = sorted(p for p, c in collectives.items() if len(c))
    if len(pids) < 2 or len(pids) < len(collectives):
        return {}, 0
    ref = min(pids, key=lambda p: len(collectives[p]))
    ref_ends = np.sort(collectives[ref][:, 1])
    spacing = float(np.median(np.diff(ref_ends))) if len(ref_ends) > 1 else float("inf")
    ordered = {p: collectives[p][np.argsort(collectives[p][:, 1])] for p in pids}
    last = dict.fromkeys(pids, 0)
    n = 0
    for end in ref_ends:
        starts = {}
        for p in pids:
            ends = ordered[p][:, 1]
            i = int(np.clip(np.searchsorted(ends, end), 1, len(ends) - 1)) if len(ends) > 1 else 0
            j = min((i - 1, i) if len(ends) > 1 else (0,), key=lambda k: abs(int(ends[k]) - int(end)))
            if abs(int(ends[j]) - int(end)) > 0.1 * spacing:
                break
            starts[p] = int(ordered[p][j, 0])
        else:
            last[max(pids, key=lambda p: starts[p])] += 1
            n += 1
    return last, n


TOGETHER = 0.1  # ranks stepping together: time per step within this share of their median


def rank_steps(procs: Sequence[_Stepping], over_steps: dict[int, Breakdown]) -> list[RankStep]:
    """The processes stepping together (at least two whose steps have the same number of kernels
    and take the same time, within TOGETHER; the largest such group), each with its time per step
    split by ``over_steps`` (pid: its breakdown over its recorded run of steps, the span its time
    per step is measured on); [] when there are none."""
    stepping = [p for p in procs if steady_span(p.step) is not None and p.pid in over_steps]
    if len(stepping) < 2:
        return []
    period, n = Counter(p.step.period_kernels for p in stepping).most_common(1)[0]
    if n < 2:
        return []

    def step_ms(p: _Stepping) -> float:
        lo, hi = steady_span(p.step) or (0, 0)
        return (hi - lo) / 1e6 / p.step.span_steps

    group = [p for p in stepping if p.step.period_kernels == period]
    median = statistics.median(step_ms(p) for p in group)
    group = [p for p in group if abs(step_ms(p) - median) <= TOGETHER * median]
    if len(group) < 2:
        return []
    out = []
    for p in group:
        b = over_steps[p.pid]
        if b.window_ns <= 0:
            continue
        per = step_ms(p) / b.window_ns  # ms of a step per ns of its run of steps
        out.append(
            RankStep(
                p.pid,
                step_ms(p),
                b.kernels_ns * per,
                b.communication_ns * per,
                b.copies_ns * per,
                b.launch_gap_ns * per,
                (b.sync_stall_ns + b.allocator_ns) * per,
            )
        )
    return sorted(out, key=lambda r: r.pid) if len(out) >= 2 else []


PARTS = (
    ("compute_ms", "its kernels take {d:.3f} ms more a step than the other ranks' (a slower GPU: its clocks "
     "or a co-tenant; or more work on this rank)"),
    ("launch_gap_ms", "its GPU waits {d:.3f} ms more a step between launches (its host threads: CPU "
     "contention, or its input pipeline feeding it late)"),
    ("copies_ms", "its copies take {d:.3f} ms more a step (its input pipeline)"),
)  # fmt: skip


def straggler(ranks: Sequence[RankStep], arrivals: tuple[dict[int, int], int] = ({}, 0)) -> Straggler | None:
    """The rank the others wait for, when its own time per step exceeds the other ranks' median by at
    least THRESHOLD of the step; None otherwise (or with fewer than two ranks). ``arrivals``:
    last_arrivals of the ranks' collectives, for the step-by-step count."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r.own_ms)
    others = [r for r in ranks if r is not slow]
    lag = slow.own_ms - statistics.median(r.own_ms for r in others)
    step = statistics.median(r.step_ms for r in ranks)
    if step <= 0 or lag < THRESHOLD * step:
        return None
    name, text = max(
        PARTS,
        key=lambda part: getattr(slow, part[0]) - statistics.median(getattr(r, part[0]) for r in others),
    )
    d = getattr(slow, name) - statistics.median(getattr(r, name) for r in others)
    last, n = arrivals
    return Straggler(slow.pid, lag, lag / step, text.format(d=d), last.get(slow.pid, 0), n)
