"""Where each running job is in the loop, in one typed record per job (JobState), and the loop's
phase derived from it (Phase).

What must survive a restart is in the store, not here: launch trials and their runs
(experiments/runs.py), the live experiments tried on a job (experiments/live.py), crash marks
(store/crashes.py), the library's policies. The phase of a captured job is also written
to its row (JobRegistry.set_phase, publish.Publisher.note_phase) each time it changes, so `gitmctl
job` shows it after the job has ended.
A JobState holds what one run of gitmd learns while the job runs; it is dropped when the job ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitmd.analysis.model import History
from gitmd.analysis.report import WindowReport
from gitmd.analysis.steps import JobSteps
from gitmd.capture.windows import WindowResult


class Phase(StrEnum):
    """A job's place in the loop, in the order a new job goes through it."""

    SETTLING = "settling"  # start-up: its first window waits, or no window has found its step yet
    OBSERVING = "observing"  # windows a tick apart until capture.session_windows are analysed
    EXPLORING = "exploring"  # a live trial (experiment) is changing it now
    TRIAL_RUN = "trial run"  # a run of its workload's launch trial: timed whole, no window
    KNOWN = "known"  # launched with its workload's validated policy, not explored
    OBSERVED = "observed"  # its observation has ended: no more windows


@dataclass
class LivePending:
    """A recurring job's validated live levers still to apply (policy.py)."""

    policy_id: int
    items: list[dict[str, Any]]
    windows: int = 0  # windows that looked for their targets
    # a policy the fleet brought, not yet confirmed here: tried as a live trial on this run (its
    # result is the confirmation, Trials.confirmed), not applied as known
    confirm: bool = False


@dataclass
class JobState:
    policy_id: int = 0  # the policy it was launched with
    live: LivePending | None = None
    live_ticks: int = 0  # duty ticks that tried its window-free levers
    trial_id: int | None = None  # the launch trial it is a run of
    # (window id, its causes above threshold, the previous window's): attribute.earlier_causes
    causes: tuple[int, set[str], set[str]] | None = None
    steady: bool = False  # a window has found its step
    settling: bool = False  # known-long: its first window waits (capture.settle_s)
    settle_age_s: float = 0.0  # how old its oldest process must be for that first window (0: settle_s)
    # the expected-duration history from its earlier windows, and its newest window (folded into
    # the history when the next one comes, so a report never judges a window against itself)
    history: History | None = None
    newest: WindowResult | None = None
    reports: dict[int, WindowReport] = field(default_factory=dict)
    steps: JobSteps | None = None  # from the latest window
    fingerprinted: bool = False
    all_dead_since: int | None = None
    windows_done: int | None = None  # windows it had, once its capture is untracked
    tried: set[str] = field(default_factory=set)  # live levers tried on this run: one try each
    experiment: threading.Event | None = None  # its running live trial's cancel flag
    # the causes that live trial may remove: the one it acts on and the others its lever addresses
    experiment_causes: set[str] = field(default_factory=set)
    observed: bool = False  # its observation has ended
    resting: str = ""  # why this run gets no window at all: earlier runs observed it (Observe.rests)
    spent: str = ""  # its exploration budget ran out (a live trial stopped by it): no other trial
    idle: str = ""  # why its latest window started no trial ("" : one started, or one runs)
    said: str = ""  # why its latest window started no live trial, as last logged
    # windows past start-up that held kernels: what the observation counts (capture.session_windows).
    # A window with no kernel shows nothing a cause could be read from — start-up, a CPU phase, or
    # kernel records that came too late for the window (H200 2026-12-03: a window of 2,159 syncs and
    # no kernel ended a job's observation, and with it the live trial its sync stall called for)
    evidence: int = 0
    window_s: float = 0.0  # its capture windows' seconds, all of them (duty and trial windows)
    window_model_s: float = 0.0  # what they cost it by gitmd's launch-cost model (capture/duty.py)
    window_kernels: int = 0  # the kernels its windows saw: its launch rate, with window_s
    first_window_ns: int = 0  # CLOCK_REALTIME: its first window opened (CUPTI attached from then on)
    observation_end_ns: int = 0  # CLOCK_REALTIME: its observation ended (CUPTI detached then, if allowed)
    observation_note: str = ""  # why its observation ended early (its run's window budget spent)
    # at its registration: gitmd's own CPU seconds and the host's (busy, total) CPU ns (Deps.own_cpu,
    # Deps.host_cpu), against which its cost record reads what both did while it ran
    cpu_at_start: tuple[float | None, tuple[int, int] | None] | None = None
    frameworks_seen: bool = False  # the frameworks its process runs were looked up (once a job)
    captured: bool = False  # it runs with the shim (a phase is kept for such jobs and resting ones)
    # it was registered for the shim and goes without it (a resting run, a launch trial's run):
    # timed by its launcher; its clean end says nothing of whether the shim is safe for its program
    shimless: bool = False
    phase: Phase | None = None  # as last written to the store
    phase_lock: threading.Lock = field(default_factory=threading.Lock)
    # one loop step at a time per job: what a window shows, choosing a trial and ending the
    # observation, from the window pool and from a live trial's end (H200 2026-12-03: one window's
    # step ended the observation while another's started a live trial, which then got no window)
    step: threading.Lock = field(default_factory=threading.Lock)

    def forget_observation(self) -> None:
        """What only a running job needs (its windows, their analysis), dropped when it ends."""
        self.live = None
        self.live_ticks = 0
        self.causes = None
        self.steady = False
        self.settling = False
        self.settle_age_s = 0.0
        self.history = None
        self.newest = None
        self.reports = {}


class States:
    """Every running job's JobState. ``exp_lock`` guards the live trials' fields (experiment,
    experiment_causes, tried) across the duty and experiment threads; ``live_lock`` applying a
    live policy (from the duty tick and from its windows)."""

    def __init__(self) -> None:
        self._by_job: dict[str, JobState] = {}
        self._lock = threading.Lock()
        self.exp_lock = threading.Lock()
        self.live_lock = threading.Lock()
        # workload id -> the causes of its latest window, whichever run it was in: a run too short
        # for two windows in a row (a 15-s job) pairs its first window with the previous run's last
        self.workload_causes: dict[str, set[str]] = {}

    def create(self, job_id: str) -> JobState:
        """A registered job's state (launch.py): the only place one is made."""
        with self._lock:
            st = self._by_job.get(job_id)
            if st is None:
                st = self._by_job[job_id] = JobState()
            return st

    def of(self, job_id: str) -> JobState:
        """The job's state; for a job gitmd holds none of (it ended, or was registered before this
        gitmd started) a blank one that is not kept, so that a read racing a job's end never
        brings its state back for good."""
        with self._lock:
            st = self._by_job.get(job_id)
        return st if st is not None else JobState()

    def get(self, job_id: str) -> JobState | None:
        with self._lock:
            return self._by_job.get(job_id)

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._by_job.pop(job_id, None)

    def running_experiments(self) -> list[threading.Event]:
        with self._lock:
            return [s.experiment for s in self._by_job.values() if s.experiment is not None]
