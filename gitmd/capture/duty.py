"""How often to open a capture window on a job so that capture stays within its overhead budget.

While a window is open every kernel launch pays CUPTI's activity cost (about 6 µs on the H200,
bench/results/2026-12-02-shim-h200.md), so a job launching R kernels per second runs up to
R x cost slower during the window. Its amortised overhead is that fraction times window/period;
the period is stretched until it fits the budget, never shortened below the configured one.

Until a window has found the job's step (start-up), and until a process's observation has its
``capture.session_windows`` windows, the next window comes a tick later (TICK_S), whatever the
budget: once a window has opened, CUPTI stays attached to the process (detached at the end of its
observation only with capture.detach_cupti), and costs a launch-bound job between windows nearly
what an open window does, so spacing windows out would only make that last longer. Start-up lasts
at most STARTUP_WINDOWS windows.

Each duty window also closes early (not before windows.CAP_MIN_S, what its analysis needs) once its
processes have written ``window_records`` records: what the budget allows over the period that
follows, so that no single window — the full one after a short first window that saw only start-up,
or one after the job's launch rate rose — costs more than that.

A job's first window is short (``capture.first_window_s``): until a window has seen the job, its
launch rate is unknown, and a full window on a launch-bound job would be the whole overhead of a
short run. From what the short one saw, the full window comes at once when it fits the budget at
the configured period, else after the stretched period.
"""

from __future__ import annotations

MAX_PERIOD_S = 3600.0
# The duty tick only opens windows that are due (each job has its own period): it runs this often,
# so that a new job's first window comes within a second of its first CUDA call, not up to a period
# later (a 15-s job could end before it).
TICK_S = 1.0
# At most this many windows of a job at the start-up pace: a job can stay without a repeating step
# for long (loading data), and every window costs it CUPTI's per-launch price.
STARTUP_WINDOWS = 6


MIN_WINDOW_RECORDS = 10_000  # a window capped lower could not show a step of a launch-heavy job


def window_records(period_s: float, budget: float, launch_cost_us: float) -> int | None:
    """The most records a duty window may gather: the launches whose cost fits the budget over the
    period that follows it. The period is stretched from what the last window saw; this bounds the
    window itself when the job's launch rate is unknown (the full window after a short first one that
    saw start-up) or has risen since. None: no cap (no budget, or no cost per launch)."""
    if budget <= 0 or launch_cost_us <= 0 or period_s <= 0:
        return None
    return max(MIN_WINDOW_RECORDS, int(budget * period_s / (launch_cost_us * 1e-6)))


# A window of a job whose step is known needs this many of its steps (detection needs 3, a cause's
# share and the fingerprint settle well before 40), not its full length: CUPTI slows every launch in
# a window, and on a launch-bound benchmark the window's part of the run is what its own clock
# measures (timm's mobilenetv3 inference at batch 1, 5-ms steps of ~150 kernels: three windows,
# 5.3 s, made its first run's mean step 32% slower than the plain run beside it, H200 2026-12-04).
WINDOW_STEPS = 40


def step_records(period_kernels: int, records: int, kernels: int) -> int | None:
    """The records a window of a job whose step is known needs (windows.CAP_MIN_S still holds): its
    WINDOW_STEPS steps of ``period_kernels`` kernels, at the ``records`` per ``kernels`` its last
    window wrote (copies, syncs, allocations, clock pairs, markers and payload samples ride along:
    the ring counts them all). None: step unknown."""
    if period_kernels <= 0 or kernels <= 0:
        return None
    return int(WINDOW_STEPS * period_kernels * max(1.0, records / kernels)) + 1


def slowdown_in_window(kernels: int, window_s: float, launch_cost_us: float) -> float:
    """Upper bound of the fraction of time a window costs the job (launch-bound assumption)."""
    if window_s <= 0:
        return 0.0
    return kernels / window_s * launch_cost_us * 1e-6


def next_period(
    kernels: int,
    window_s: float,
    every_s: float,
    budget: float,
    launch_cost_us: float,
    coming_s: float | None = None,
) -> float:
    """Seconds until this job's next duty-cycle window, from the ``kernels`` a window of
    ``window_s`` saw; the windows to come last ``coming_s`` (default: as long as this one)."""
    frac = slowdown_in_window(kernels, window_s, launch_cost_us)
    if budget <= 0:
        return MAX_PERIOD_S
    coming = window_s if coming_s is None else coming_s
    return min(MAX_PERIOD_S, max(every_s, coming * frac / budget))
