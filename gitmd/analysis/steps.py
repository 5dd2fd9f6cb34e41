"""Step detection: the period of a job's kernel-name sequence, found with no instrumentation.

In a training or inference loop most kernels run a fixed number of times per step, so the most
common per-name count in a window is (about) the number of steps. Among the names with that count,
the anchor is the one whose occurrences are most evenly spaced in the sequence; the median spacing
is the step length in kernels, confirmed when the sequence matches itself shifted by that length.
Step boundaries are the anchor's launches and step times the spacing of their GPU start times.
Occasional extra work (evaluation, logging, checkpoints) lengthens a few gaps and moves neither the
median spacing nor the median step time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.analysis.breakdown import merge_intervals
from gitmd.records import WindowResult

MIN_STEPS = 3
MIN_SELF_MATCH = 0.6  # share of kernels that equal the kernel one period later
MAX_ANCHOR_CANDIDATES = 16
MAX_MULTIPLE = 4
MAX_COUNT_CANDIDATES = 6  # step counts tried, the most common first
EDGE_STEPS = 3.0  # a window's first or last step longer than this many median steps is not counted


@dataclass(frozen=True)
class StepStats:
    found: bool
    reason: str  # why not, when not found
    period_kernels: int = 0  # kernels per step
    steps: int = 0  # complete steps in the window
    median_ns: float = 0.0
    p10_ns: float = 0.0
    p90_ns: float = 0.0
    self_match: float = 0.0  # share of the sequence that repeats one period later
    regularity: float = 0.0  # share of steps within 10% of the median length in kernels
    anchor_name_id: int = 0
    # The recorded run of steps (steady_span): from the start of the first regular step to the end
    # of the last one, and the steps between (CUPTI clock; 0 when not found)
    span_start_ns: int = 0
    span_end_ns: int = 0
    span_steps: int = 0

    @property
    def confidence(self) -> float:
        return self.self_match * self.regularity if self.found else 0.0


def _none(reason: str) -> StepStats:
    return StepStats(found=False, reason=reason)


def detect(name_ids: np.ndarray, start_ns: np.ndarray) -> StepStats:
    """Steps in one process's kernels of one window. Inputs need not be sorted."""
    n = len(name_ids)
    if n < 2 * MIN_STEPS:
        return _none(f"only {n} kernels in the window")
    order = np.argsort(start_ns, kind="stable")
    seq = np.asarray(name_ids)[order].astype(np.int64)
    starts = np.asarray(start_ns)[order].astype(np.int64)

    names, inverse, counts = np.unique(seq, return_inverse=True, return_counts=True)
    eligible = counts >= MIN_STEPS
    if not eligible.any():
        return _none("no kernel repeats often enough to mark steps")
    # The most common count among repeating names (each name weighted once) is the number of steps in
    # a window of one phase. A window across two (a training epoch's end and its validation, timm's
    # train.py on the H200 2026-12-04: most names ran 4 times in 15.5 steps of 447 kernels) is tried
    # at its next most common counts too, the first that repeats taken.
    values, freq = np.unique(counts[eligible], return_counts=True)
    tried: list[str] = []
    for step_count in values[np.argsort(-freq, kind="stable")][:MAX_COUNT_CANDIDATES]:
        got = _at_count(int(step_count), seq, starts, names, inverse, counts, tried)
        if got is not None:
            return got
    return _none(
        "the kernel sequence does not repeat (self-match " + ", ".join(tried or ["-"]) + " kernels)"
        if tried
        else "no evenly spaced kernel to mark steps"
    )


def _at_count(
    step_count: int,
    seq: np.ndarray,
    starts: np.ndarray,
    names: np.ndarray,
    inverse: np.ndarray,
    counts: np.ndarray,
    tried: list[str],
) -> StepStats | None:
    """The steps when ``step_count`` names' count is the number of steps (None: they do not repeat;
    what was tried is added to ``tried``)."""
    n = len(seq)
    # Names whose count is within one of it (a window cuts its first and last step).
    candidates = np.flatnonzero(np.abs(counts - step_count) <= 1)
    best: tuple[float, int, np.ndarray] | None = None
    for c in candidates[:MAX_ANCHOR_CANDIDATES]:
        where = np.flatnonzero(inverse == c)
        gaps = np.diff(where)
        if len(gaps) < MIN_STEPS - 1:
            continue
        med = float(np.median(gaps))
        spread = float(np.median(np.abs(gaps - med))) / med if med else 1.0
        if best is None or spread < best[0]:
            best = (spread, int(names[c]), where)
    if best is None:
        return None
    _, anchor, where = best
    # The anchor may run k times per step (its count was k x steps), unevenly spaced inside it:
    # the step is then the spacing between an occurrence and the k-th next. Try k = 1..MAX_MULTIPLE.
    self_match, period = 0.0, 0
    for k in range(1, MAX_MULTIPLE + 1):
        if len(where) <= k * (MIN_STEPS - 1):
            break
        period = round(float(np.median(where[k:] - where[:-k])))
        if period < 1 or period * MIN_STEPS > n:
            break
        self_match = float(np.mean(seq[:-period] == seq[period:]))
        tried.append(f"{self_match:.2f} at {period}")
        if self_match >= MIN_SELF_MATCH:
            where = where[::k]
            break
    else:
        period = 0
    if period == 0 or self_match < MIN_SELF_MATCH:
        return None
    gaps = np.diff(where)
    ok = np.abs(gaps - period) <= max(1.0, 0.1 * period)
    regular = float(np.mean(ok))
    times = np.diff(starts[where]).astype(np.float64)
    # the recorded run of steps: its first and last regular step (none regular: no span), the edge
    # ones also no longer than EDGE_STEPS median steps (a stray anchor record followed by about a
    # period of kernels after CUPTI's silent start would count a recording gap as a step)
    first, last = (int(np.argmax(ok)), len(ok) - 1 - int(np.argmax(ok[::-1]))) if ok.any() else (0, -1)
    if last >= first:
        longest = EDGE_STEPS * float(np.median(times[ok]))
        while first <= last and (not ok[first] or times[first] > longest):
            first += 1
        while last >= first and (not ok[last] or times[last] > longest):
            last -= 1
    return StepStats(
        found=True,
        reason="",
        period_kernels=period,
        steps=len(times),
        median_ns=float(np.median(times)),
        p10_ns=float(np.percentile(times, 10)),
        p90_ns=float(np.percentile(times, 90)),
        self_match=self_match,
        regularity=regular,
        anchor_name_id=anchor,
        span_start_ns=int(starts[where[first]]) if last >= first else 0,
        span_end_ns=int(starts[where[last + 1]]) if last >= first else 0,
        span_steps=last + 1 - first,
    )


def steady_span(stats: StepStats) -> tuple[int, int] | None:
    """The part of a window its steps were recorded in, whole: from the start of its first regular
    step (as many kernels as the period, within 10%) to the end of its last (CUPTI clock), or None
    with no step found. A window's edges are not the job's: CUPTI records nothing for a while after
    its activity is enabled (about 330 ms on the H200, 2026-12-04), and a lone record from before the
    window or from that while is delivered with it — a kernel 3.1 s before a window opened, or one
    followed by 42 ms without records while the job ran steps back to back. Counted, those made an
    fp32 MLP's windows 94% and 18% launch-bound between windows 79% fp32 GEMMs (so no cause held two
    windows in a row and run 1 planned nothing), and its time per step a window's length over its
    steps (3x its real step: a CPU placement read 1.66x, 0.67-4.1). A stray record's step has the
    wrong number of kernels, so the span begins after it."""
    if not stats.found or stats.span_steps <= 0 or stats.span_end_ns <= stats.span_start_ns:
        return None
    return stats.span_start_ns, stats.span_end_ns


@dataclass(frozen=True)
class JobSteps:
    """A job's steps in one window: found in the process that launched the most kernels."""

    pid: int
    window_id: int
    stats: StepStats
    anchor_kernel: str


def job_steps(window: WindowResult) -> JobSteps | None:
    procs = [p for p in window.processes if len(p.records.kernels)]
    if not procs:
        return None
    main = max(procs, key=lambda p: len(p.records.kernels))
    k = main.records.timed().kernels  # kernels CUPTI gave no timestamps cannot be placed in order
    stats = detect(k["name_id"], k["start_ns"])
    return JobSteps(main.pid, window.window_id, stats, main.records.names.get(stats.anchor_name_id, ""))


MIN_BUSY_KERNELS = 10  # fewer kernels in a window: no busy share


def gpu_busy(start_ns: np.ndarray, end_ns: np.ndarray) -> float | None:
    """Share of [first start, last end] covered by at least one of the kernel intervals (None: too
    few kernels to say)."""
    st = np.asarray(start_ns, dtype=np.int64)
    en = np.asarray(end_ns, dtype=np.int64)
    ok = (st > 0) & (en > st)
    if int(ok.sum()) < MIN_BUSY_KERNELS:
        return None
    s, e = merge_intervals(st[ok], en[ok])
    span = int(e[-1] - s[0])
    return int((e - s).sum()) / span if span > 0 else None


def step_timing(window: WindowResult, steps: JobSteps | None) -> tuple[float | None, float | None]:
    """The job's time per step in a window (ms; None: no step found) and the GPU-busy share of its
    stepping process's kernels (None: too few), from one pass over them. Time per step is the mean
    over the window's recorded run of steps (steady_span), not their median: a thread that loses its
    core for whole time slices runs its steps at full speed when it runs, so a median step would
    hide exactly what contention costs. Not the window's length over its steps either: CUPTI records
    nothing for the first ~330 ms of a window (steady_span), and a job that queues far ahead of its
    GPU has only the kernels launched while the window was open recorded, run back to back in a
    tenth of it (bf16 GEMMs 50 steps ahead on the H200: 15.2 and 18.4 ms by the window's length for
    a 1.7-ms step; a CPU placement measured 1.21x faster that way delivered 1.001x)."""
    if steps is None:
        return None, None
    main = next((p for p in window.processes if p.pid == steps.pid), None)
    span = steady_span(steps.stats)
    k = main.records.timed().kernels if main is not None else None
    if k is not None and span is not None:
        k = k[(k["end_ns"].astype(np.int64) > span[0]) & (k["start_ns"].astype(np.int64) < span[1])]
    busy = gpu_busy(k["start_ns"], k["end_ns"]) if k is not None else None  # over the same steps
    if span is None:
        return None, busy
    return (span[1] - span[0]) / 1e6 / steps.stats.span_steps, busy


def time_per_step_ms(window: WindowResult, steps: JobSteps | None) -> float | None:
    """The job's time per step in a window (step_timing)."""
    return step_timing(window, steps)[0]
