"""The attribution report of one window: per process, the time breakdown, the step, the top
kernels, pageable copies and allocator activity; for the job's busiest process, the causes of lost
time ranked by cost with their evidence, the Granger tests behind them and the levers they select.
One builder for the daemon (GetAttribution) and for offline capture files (gitmctl explain --capture).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gitmd.analysis import causality, context_stats
from gitmd.analysis.breakdown import Breakdown, breakdown, collectives, merge_intervals, opened_at
from gitmd.analysis.causality import GrangerTest
from gitmd.analysis.causes import Cause, rank
from gitmd.analysis.context_stats import GpuStats, HostStats
from gitmd.analysis.model import History, KernelModel, Residuals, summary_of
from gitmd.analysis.steps import EDGE_STEPS, StepStats, detect, steady_span
from gitmd.analysis.stragglers import RankStep, Straggler, last_arrivals, rank_steps, straggler
from gitmd.analysis.timeline import cupti_to_real_offset
from gitmd.records import Decoded, ProcessWindow, WindowResult

CLASSES = ("kernels", "copies", "communication", "launch_gaps", "sync_stall", "allocator")
MIN_BIN_NS = 10_000_000

Tester = Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], list[GrangerTest]]


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
    cause_pid: int = 0  # the process the causes are about (the most kernels; a straggler when one is)
    causes: list[Cause] = field(default_factory=list)
    tests: list[GrangerTest] = field(default_factory=list)
    host: HostStats | None = None
    gpu: GpuStats | None = None
    residuals: Residuals | None = None
    history_windows: int = 0
    # a distributed job's ranks stepping together in the window, and the one the others wait for
    ranks: list[RankStep] = field(default_factory=list)
    straggler: Straggler | None = None


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


def busiest(w: WindowResult) -> ProcessWindow | None:
    procs = [p for p in w.processes if len(p.records.kernels) or len(p.records.memcpys)]
    return max(procs, key=lambda p: (len(p.records.kernels), len(p.records.memcpys))) if procs else None


def idle_share(b: Breakdown) -> float:
    return (b.launch_gap_ns + b.sync_stall_ns + b.allocator_ns) / b.window_ns if b.window_ns else 0.0


def window_report(
    w: WindowResult,
    top: int = 8,
    history: History | None = None,
    tester: Tester | None = causality.granger,
) -> WindowReport:
    """``history``: the job's earlier windows (history_of); the expected-duration model comes from
    them, or from this window when there are none. ``tester``: runs the Granger tests (None: none)."""
    w = dataclasses.replace(
        w, processes=[dataclasses.replace(p, records=p.records.timed()) for p in w.processes]
    )
    procs = []
    counted: dict[int, Decoded] = {}  # each process's records over what its breakdown covers
    for p in w.processes:
        r = p.records
        if not (len(r.kernels) or len(r.memcpys)):
            continue
        st, b, counted[p.pid] = analysed(r)
        procs.append(ProcessReport(p.pid, b, st, top_kernels(r, top)))
    over_steps = {}  # each process's breakdown over its run of steps: its time per step's basis
    stepping = [(pr.pid, sp) for pr in procs if (sp := steady_span(pr.step)) is not None]
    if len(stepping) >= 2:  # ranks to compare (one process: nothing to split again)
        for pid, sp in stepping:
            over_steps[pid] = breakdown(counted[pid].within(*sp), sp)
    ranks = rank_steps(procs, over_steps)
    comm = {r.pid: counted[r.pid].kernels[collectives(counted[r.pid])] for r in ranks}
    spans = {p: np.stack([k["start_ns"], k["end_ns"]], axis=1).astype(np.int64) for p, k in comm.items()}
    waited_for = straggler(ranks, last_arrivals(spans))
    # the causes are the busiest process's — or a distributed job's straggler's: the others wait
    # for it, so its causes are what the job's step is made of
    main = busiest(w)
    if waited_for is not None:
        main = next((p for p in w.processes if p.pid == waited_for.pid), main)
    if main is None:
        return WindowReport(w.job_id, w.window_id, procs, list(w.notes))
    notes = list(w.notes)
    records = counted.get(main.pid, main.records)
    past = history is not None and history.windows > 0
    model = history.model() if history is not None and past else KernelModel.fit([records])
    residuals, slow = model.residuals(records)
    resid = summary_of(residuals, slow, from_history=past)
    hist_idle = history.idle_share() if history is not None and past else None
    host = context_stats.host_stats(w.context)
    gpu = context_stats.gpu_stats(w.context)
    tests: list[GrangerTest] = []
    offset = cupti_to_real_offset(main.clock_pairs)
    if tester is not None and offset is not None and len(w.context.host) >= 2:
        ctx = w.context
        bin_ns = max(MIN_BIN_NS, round(ctx.interval_s * 1e9))
        edges = causality.edges_for(int(ctx.host["t_ns"][0]), int(ctx.host["t_ns"][-1]), bin_ns)
        if len(edges) - 1 >= causality.MIN_BINS:
            try:
                tests = tester(
                    causality.targets(records, offset, residuals, edges),
                    context_stats.series(ctx, edges),
                )
            except Exception as e:  # the tests are evidence; their failure must not cost the report
                notes.append(f"Granger tests not run: {type(e).__name__}: {e}")
        else:
            notes.append(
                f"Granger tests not run: the window holds {len(edges) - 1} bins of {bin_ns / 1e6:.0f} ms, "
                f"fewer than {causality.MIN_BINS}"
            )
    b = next(p.breakdown for p in procs if p.pid == main.pid)
    causes = rank(b, records, host, gpu, resid, hist_idle, tests)
    return WindowReport(
        w.job_id,
        w.window_id,
        procs,
        notes,
        main.pid,
        causes,
        tests,
        host,
        gpu,
        resid,
        history.windows if history is not None else 0,
        ranks,
        waited_for,
    )


def contiguous(r: Decoded, span: tuple[int, int], max_gap_ns: float, step_kernels: int) -> tuple[int, int]:
    """``span`` widened to the GPU work recorded next to it: through every kernel, copy or memset
    that follows the one before with no silence longer than ``max_gap_ns``, and past such a silence
    too when what lies beyond it is at least a step's worth of records (``step_kernels``): the work
    a job does before or after its steps — a CUDA program's copies around its kernel loop — is its
    own. Less than a step's worth beyond a longer silence is a stray record (steps.steady_span)."""
    starts = np.concatenate([r.kernels["start_ns"], r.memcpys["start_ns"], r.memsets["start_ns"]]).astype(
        np.int64
    )
    ends = np.concatenate([r.kernels["end_ns"], r.memcpys["end_ns"], r.memsets["end_ns"]]).astype(np.int64)
    if not len(starts):
        return span
    s, e = merge_intervals(starts, ends)  # sorted, disjoint stretches of GPU work
    lo, hi = span
    k = min(int(np.searchsorted(e, lo, side="left")), len(s) - 1)  # the stretch holding lo
    left = min(lo, int(s[k]))
    while k > 0 and left - int(e[k - 1]) <= max_gap_ns:
        k -= 1
        left = int(s[k])
    if k > 0 and int((starts < left).sum()) >= step_kernels:
        left = int(s[0])
    m = max(0, int(np.searchsorted(s, hi, side="right")) - 1)  # the stretch holding hi
    right = max(hi, int(e[m]))
    while m < len(s) - 1 and int(s[m + 1]) - right <= max_gap_ns:
        m += 1
        right = int(e[m])
    if m < len(s) - 1 and int((starts > right).sum()) >= step_kernels:
        right = int(e[-1])
    return left, right


def analysed(r: Decoded) -> tuple[StepStats, Breakdown, Decoded]:
    """A process's steps in a window (timed records), its breakdown, and the records both cover:
    from the window's open marker on, its recorded run of steps (steps.steady_span) and the work
    recorded next to it (contiguous), or with no step found the whole window from the marker on.
    Every total a cause is made of (fp32 GEMM time, pageable copies, stream waits, kernel residuals)
    is taken over the same records as the time it is a share of."""
    st = detect(r.kernels["name_id"], r.kernels["start_ns"])
    span = steady_span(st)
    opened = opened_at(r)
    after = r.within(opened, np.iinfo(np.int64).max) if opened is not None else r  # the window's own
    if span is not None:
        span = contiguous(after, span, EDGE_STEPS * st.median_ns, st.period_kernels)
        inside = after.within(*span)
        return st, breakdown(inside, span), inside
    return st, breakdown(after), after


def add_to_history(history: History, w: WindowResult) -> None:
    """Fold a window of the job into its history (its busiest process, timed records only)."""
    main = busiest(w)
    if main is not None:
        r = main.records.timed()
        _, b, inside = analysed(r)
        history.add(inside, idle_share(b))


def history_of(windows: list[WindowResult]) -> History:
    h = History()
    for w in windows:
        add_to_history(h, w)
    return h
