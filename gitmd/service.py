"""The transport-free facade: every API operation as a plain method. No grpc in here.

The servicer converts messages and calls these; tests and other transports can call them directly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gitmd import __version__
from gitmd.analysis import timeline as timeline_mod
from gitmd.analysis.causes import starved_stream
from gitmd.analysis.fingerprint import signature
from gitmd.analysis.hostbuffers import HotBuffer, hot_pageable_buffers, to_pin
from gitmd.analysis.model import History
from gitmd.analysis.report import WindowReport, add_to_history, window_report
from gitmd.analysis.steps import JobSteps, StepStats, job_steps, step_timing
from gitmd.analysis.trace_export import dumps, to_chrome_trace
from gitmd.analysis.worker import GrangerWorker
from gitmd.capture import capture_file, duty
from gitmd.capture.payloads import scalars as payload_scalars
from gitmd.capture.ring import RingStatus
from gitmd.capture.windows import CaptureManager, JobCapture, ProcessWindow, WindowResult
from gitmd.config import Config
from gitmd.errors import GitmdError, InvalidArgumentError, NotFoundError
from gitmd.events import Hub, Watch
from gitmd.experiments.decide import Decision, decide
from gitmd.experiments.equivalence import Verdict
from gitmd.experiments.interventions import Intervention, Interventions
from gitmd.experiments.live import (
    Experiment,
    ExperimentStore,
    LiveExperiment,
    Measurement,
    decision_json,
)
from gitmd.experiments.runs import MAX_SPOILED, LaunchTrials, decide_trial
from gitmd.experiments.tune import TunedLever, tune_lever
from gitmd.jobs.discovery import UntrackedProcess, untracked
from gitmd.jobs.launch import LaunchPlan
from gitmd.jobs.launch_key import launch_key
from gitmd.jobs.registry import Job, JobRegistry, Registration
from gitmd.levers.base import Lever, LeverError, Risk, Target
from gitmd.levers.host import CpuLoad, gpu_local_cpus, quiet_cpus
from gitmd.levers.launch_env import LIVE_FLAG_LEVERS, LIVE_FLAGS_VAR, EnvLever, with_site
from gitmd.levers.registry import CATALOG
from gitmd.levers.registry import make as make_lever
from gitmd.levers.shim_knobs import AllocKeepCacheLive, SyncSpin
from gitmd.store.audit import Audit
from gitmd.store.audit import row as audit_row
from gitmd.store.crashes import SuspectCrashes, crash_signal, signal_name
from gitmd.store.library import LIVE_POLICY_LEVERS, Library, Policy, Workload
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import GpuInfo, GpuSample, TelemetryBackend
from gitmd.telemetry.sampler import Sampler

log = logging.getLogger(__name__)
LIVE_POLICY_WINDOWS = 5  # windows a run's live policy waits for its target to show
LIVE_POLICY_TICKS = 30  # duty ticks (~1 s) a window-free lever of it waits for its target to show
# live levers whose target is the job's processes themselves (or its background co-tenants'): a
# policy of them is applied as soon as the processes show, with no capture window
WINDOW_FREE_LEVERS = frozenset({"cpu_affinity", "sched_priority", "cotenant_yield", "alloc_keep_cache_live"})

DEFAULT_TELEMETRY_LIMIT = 10_000
MAX_TRACE_S = 300.0
REPORTS_KEPT = 8  # attribution reports kept per job (gitmctl explain --window)
REAP_AFTER_S = 60.0  # every process of a job gone this long, and no exit reported: the job is lost
EXPIRE_UNSTARTED_S = 3600.0  # registered, never started a CUDA process
SCHEDULER_JOB_MAX_S = 30 * 86400.0  # a scheduler-closed job whose end never came (gitmd was down)
LOST_EXIT_CODE = -1000
TRACE_CHUNK = 1 << 20
MAX_TELEMETRY_LIMIT = 1_000_000


@dataclass(frozen=True)
class Status:
    version: str
    uptime_s: float
    started_at_ns: int
    backend: str
    gpu_count: int
    driver_version: str
    socket_path: str
    state_dir: str
    sample_interval_s: float
    samples_taken: int
    sample_field_errors: int
    config: dict[str, str]
    pid: int


@dataclass(frozen=True)
class TelemetryPage:
    samples: list[GpuSample]
    truncated: bool


@dataclass(frozen=True)
class JobView:
    job: Job
    processes: list[tuple[RingStatus, bool]]  # shim status of each process, alive or not
    windows: int
    steps: JobSteps | None = None  # from the latest window
    policy_id: int = 0  # the policy it was launched with


@dataclass(frozen=True)
class JobEvent:
    kind: str  # registered, running, window, exited, lost
    at_ns: int
    view: JobView


@dataclass(frozen=True)
class TraceResult:
    chunks: Iterator[bytes]
    summary: dict[str, Any]


class Service:
    def __init__(
        self,
        config: Config,
        backend: TelemetryBackend,
        sampler: Sampler,
        telemetry: TelemetryStore,
        jobs: JobRegistry,
        capture: CaptureManager | None,
        library: Library,
    ) -> None:
        self.config = config
        self.backend = backend
        self.sampler = sampler
        self.telemetry_store = telemetry
        self.jobs = jobs
        self.capture = capture
        self.library = library
        self.audit = Audit(jobs.store)
        self.interventions = Interventions(jobs.store, backend)
        self.experiments = ExperimentStore(jobs.store)
        self._exp_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="experiment")
        self._exp_running: dict[str, threading.Event] = {}  # job id -> its experiment's cancel flag
        # job id -> the causes its running live experiment may remove: the one it acts on and the
        # others its lever addresses (no launch trial on those meanwhile)
        self._exp_cause: dict[str, set[str]] = {}
        self._exp_tried: set[tuple[str, str]] = set()  # (job id, lever): one try per job
        self._exp_lock = threading.Lock()
        self._fingerprinted: set[str] = set()
        self._policies: dict[str, int] = {}  # job id -> the policy it was launched with
        self.trials = LaunchTrials(jobs.store)
        self.crashes = SuspectCrashes(jobs.store)
        self._trial_runs: dict[str, int] = {}  # job id -> the launch trial it is a run of
        self._live_pending: dict[str, list[Any]] = {}  # job id -> [policy id, live levers left, windows]
        self._live_lock = threading.Lock()  # applying a live policy: from the duty tick and its windows
        self._live_ticks: dict[str, int] = {}  # job id -> duty ticks that tried its window-free levers
        # job id -> (window id, its causes above threshold, the previous window's): _earlier_causes
        self._trial_causes: dict[str, tuple[int, set[str], set[str]]] = {}
        # workload id -> the causes of its latest window, whichever run it was in: a run too short
        # for two windows in a row (a 15-s job) pairs its first window with the previous run's last
        self._workload_causes: dict[str, set[str]] = {}
        self._steady: set[str] = set()  # jobs a window has found the step of
        self._settling: set[str] = set()  # known-long jobs whose first window waits (capture.settle_s)
        self._all_dead_since: dict[str, int] = {}
        self.job_events: Hub[JobEvent] = Hub()
        self._duty_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="window")
        self._steps: dict[str, JobSteps] = {}
        self._windows_done: dict[str, int] = {}  # job id -> windows it had, once its capture is untracked
        # Per job: the expected-duration history from its earlier windows, and its newest window
        # (folded into the history when the next one comes, so a report never judges a window
        # against itself).
        self._history: dict[str, History] = {}
        self._newest: dict[str, WindowResult] = {}
        self._reports: dict[str, dict[int, WindowReport]] = {}
        self.granger = GrangerWorker()
        self.cpu_load = CpuLoad()  # sampled by the daemon every second: where a job's CPUs go
        self.started_at_ns = time.time_ns()
        self._started_mono = time.monotonic()
        self._gpus = backend.gpus()
        self.alive = threading.Event()
        self.alive.set()

    def status(self) -> Status:
        return Status(
            version=__version__,
            uptime_s=time.monotonic() - self._started_mono,
            started_at_ns=self.started_at_ns,
            backend=self.backend.name,
            gpu_count=len(self._gpus),
            driver_version=self.backend.driver_version(),
            socket_path=str(self.config.daemon.socket_path),
            state_dir=str(self.config.daemon.state_dir),
            sample_interval_s=self.config.telemetry.interval_s,
            samples_taken=self.sampler.stats.samples,
            sample_field_errors=self.sampler.stats.field_errors,
            config=self.config.summary(),
            pid=os.getpid(),
        )

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def _check_gpu(self, gpu_index: int | None) -> None:
        if gpu_index is not None and not 0 <= gpu_index < len(self._gpus):
            have = f"0..{len(self._gpus) - 1}" if self._gpus else "none"
            raise NotFoundError(f"no GPU with index {gpu_index} (this host has {len(self._gpus)}: {have})")

    def telemetry(self, gpu_index: int | None, since_ns: int, until_ns: int, limit: int) -> TelemetryPage:
        self._check_gpu(gpu_index)
        if limit < 0 or limit > MAX_TELEMETRY_LIMIT:
            raise InvalidArgumentError(f"limit must be 0..{MAX_TELEMETRY_LIMIT}, got {limit}")
        if since_ns < 0 or until_ns < 0:
            raise InvalidArgumentError("since and until must not be negative")
        if since_ns == 0 and until_ns == 0:
            return TelemetryPage(self.sampler.latest(gpu_index), False)
        until = until_ns or time.time_ns()
        if until <= since_ns:
            raise InvalidArgumentError(f"until ({until}) must be after since ({since_ns})")
        samples, truncated = self.telemetry_store.query(
            gpu_index, since_ns, until, limit or DEFAULT_TELEMETRY_LIMIT
        )
        return TelemetryPage(samples, truncated)

    def watch_telemetry(self, gpu_index: int | None) -> Watch[GpuSample]:
        self._check_gpu(gpu_index)
        return self.sampler.watch(gpu_index, self.alive)

    # -- jobs --------------------------------------------------------------------------------
    def register_job(
        self, reg: Registration, audit_row: dict[str, Any] | None = None
    ) -> tuple[JobView, LaunchPlan]:
        capture = reg.capture
        want_capture = capture and self.capture is not None
        found: dict[str, Workload] = {}
        suspect = None
        if want_capture:
            key = reg.launch_key or launch_key(list(reg.command), reg.cwd)
            w0 = self.library.by_launch_key(key)
            suspect = self.crashes.find(w0.id if w0 else "", key)
            if suspect is not None:
                want_capture = False  # run plainly until one run ends clean (gitmd/store/crashes.py)

        def resolve(key: str) -> str:
            w = self.library.by_launch_key(key)
            if w is not None:
                found["w"] = w
            return w.id if w else ""

        job, plan = self.jobs.register(dataclasses.replace(reg, capture=want_capture), resolve, audit_row)
        workload = found.get("w")
        if workload is not None:
            # A recurring job: its known-good policy comes with the launch, no experiment needed.
            policy = workload.active_policy_for(job.uid)
            env = {**(policy.env if policy else {}), **plan.env}  # gitmd's own variables win
            plan = dataclasses.replace(
                plan,
                env=env,
                workload_id=workload.id,
                policy_id=policy.id if policy else 0,
                policy_status=policy.status if policy else "",
            )
            self._policies[job.id] = policy.id if policy else 0
            live = workload.live_policy_for(job.uid)
            if live is not None and plan.capture:
                # applied (and kept) once the run's processes are seen: no experiment needed
                items = [dict(x) for x in live.live]
                self._live_pending[job.id] = [live.id, items, 0]
                cpus = self._exec_cpus(job, reg.cpus, items)
                if cpus:
                    plan = dataclasses.replace(plan, cpus=cpus)
                if not policy:
                    self._policies[job.id] = live.id
                    plan = dataclasses.replace(plan, policy_id=live.id, policy_status=live.status)
            if reg.allow_exploration and plan.capture and self.config.experiments.enabled:
                plan = self._trial_arm(job, workload.id, plan)
                if self._known(job.id) and not plan.trial:
                    log.info(
                        "job %s (%s): launched with policy %d of workload %s; not explored "
                        "(experiments.explore_known = false)",
                        job.id,
                        job.name,
                        self._policies[job.id],
                        workload.id,
                    )
        if plan.capture and set(LIVE_FLAG_LEVERS) & set(self.config.experiments.live_levers):
            plan = dataclasses.replace(plan, env={**plan.env, LIVE_FLAGS_VAR: "1"})
        plan = dataclasses.replace(plan, env=with_site(plan.env))  # framework knobs: gitmd's sitecustomize
        if capture and self.capture is None:
            plan = LaunchPlan(
                plan.env, (*plan.warnings, "the job runs untraced: capture is off in gitmd"), False
            )
        if suspect is not None:
            plan = dataclasses.replace(
                plan,
                warnings=(
                    *plan.warnings,
                    f"runs without gitmd's capture: run {suspect.job_id} of this program crashed under it "
                    f"({suspect.reason}); capture resumes once a run ends cleanly without it",
                ),
            )
        if plan.capture and self.capture is not None:
            self.capture.track(job.id, Path(job.runtime_dir))
            why = self._settles(job, plan)
            if why:
                self._settling.add(job.id)
                log.info(
                    "job %s (%s): %s; its first capture window waits until its processes are %.0f s old "
                    "(capture.settle_s)",
                    job.id,
                    job.name,
                    why,
                    self.config.capture.settle_s,
                )
        for w in plan.warnings:
            log.warning("job %s (%s): %s", job.id, job.name, w)
        view = self._view(job)
        self._publish("registered", view)
        return view, plan

    def _settles(self, job: Job, plan: LaunchPlan) -> str:
        """Why the job's first duty window waits until its processes are capture.settle_s old ("":
        it does not).
        From a process's first window on, CUPTI stays attached to it with its activity off (the shim
        never detaches it by default: detaching crashed jobs), which costs a launch-bound job ~40%;
        an earlier first window costs that for longer, and start-up rarely shows the step.
        A job is taken as long until it has shown otherwise: a first run waits (CuPy control, H200
        2026-12-03: its first 30-s run +18.1% with a window at start-up, its recurring ones +2.6%),
        as does a recurring job whose earlier runs (the latest three) all lasted at least twice
        settle_s, and one that got its workload's policy and is not explored (_known: contended's
        policy runs, H200 2026-12-03: 0.12-0.15 ms/step under the policy against 0.09 without gitmd).
        A job one of whose runs was shorter keeps the early window (its start-up is most of its
        life), as does one with a live policy whose lever needs a window to find what it acts on (a
        stream, a buffer). A launch trial's run gets no window at all (its own clock measures it)."""
        settle = self.config.capture.settle_s
        if settle <= 0 or plan.trial:
            return ""
        pending = self._live_pending.get(job.id)
        if pending is not None and any(x.get("lever") not in WINDOW_FREE_LEVERS for x in pending[1]):
            return ""
        if self._known(job.id):
            return "it got its workload's policy"
        runs = self.jobs.earlier_runs_s(job.launch_key, job.created_ns)
        if not runs:
            return "a first run (taken as long until it has shown otherwise)"
        return f"its earlier runs lasted over {2 * settle:.0f} s" if min(runs) >= 2 * settle else ""

    def _unsettled(self, job_id: str, procs: list[tuple[RingStatus, bool]]) -> bool:
        """A settling job whose oldest live process is younger than capture.settle_s."""
        if job_id not in self._settling:
            return False
        born = [st.created_real_ns for st, alive in procs if alive and st.created_real_ns]
        if born and time.time_ns() - min(born) < self.config.capture.settle_s * 1e9:
            return True
        self._settling.discard(job_id)  # settled: from now on its windows come as any job's
        log.info("job %s: its processes have settled; first capture window now", job_id)
        return False

    def _trial_arm(self, job: Job, workload_id: str, plan: LaunchPlan) -> LaunchPlan:
        """A launch trial of the workload runs: this launch is its next run, arm A or B."""
        if self.trials.running(workload_id) is None:
            return plan  # the common case, read only: no write transaction per registration
        got = self.trials.assign(workload_id, job.id, job.uid)
        if got is None:
            return plan
        t, arm = got
        self._trial_runs[job.id] = t.id
        # the lever's variables are never gitmd's own (a policy may not set those)
        env = {**plan.env, **t.lever_obj().values()} if arm == "B" else plan.env
        cfg = self.config.experiments
        total = 2 * cfg.run_rounds
        # an early stop decides after any complete pair; otherwise run_rounds pairs
        length = f"2-{total}" if cfg.early_speedup > 0 else f"{total}"
        note = (
            f"launch trial {t.id}: {t.lever_obj().describe()}, arm {arm} "
            f"({'with' if arm == 'B' else 'without'} it; run {len(t.runs)} of {length})"
        )
        log.info("job %s (%s): %s", job.id, job.name, note)
        return dataclasses.replace(plan, env=env, trial=note)

    def _trial_run_ended(
        self,
        job_id: str,
        exit_code: int | None,
        metrics: dict[str, list[float]],
        run_s: float | None,
        crash: str,
    ) -> None:
        tid = self._trial_runs.pop(job_id, None)
        if tid is None:
            return
        t = self.trials.finish_run(job_id, tid, run_s, exit_code, metrics, crashed=crash)
        if t is None:
            return
        cfg = self.config.experiments
        job = self.jobs.get(job_id)
        if t.spoiled() >= MAX_SPOILED:
            why = f"{t.spoiled()} runs have no length by their own clock or crashed"
            self.trials.end(t, "abandoned", {"promote": False, "reason": why})
            log.info("launch trial %d (%s): abandoned: %s", t.id, t.lever, why)
            return
        in_trial = {r["job_id"] for r in t.runs}
        earlier = self.jobs.plain_runs_s(job.launch_key, exclude=in_trial)
        d = decide_trial(t, job.contract, cfg.run_rounds, cfg.min_gain, cfg.early_speedup, earlier)
        if d is None:
            return
        lever = t.lever_obj()
        decision = {**decision_json(d), "runs": [r["job_id"] for r in t.runs]}
        self.trials.end(t, "promoted" if d.promote else "reverted", decision)
        now = time.time_ns()
        arms = [
            {
                "arm": r["arm"],
                "window_id": 0,
                "run_s": r.get("run_s"),
                "at_ns": now,
                "job_id": r["job_id"],
            }
            for r in t.runs
        ]
        e = self.experiments.record(
            job.id, lever, t.cause, "promoted" if d.promote else "reverted", arms,
            {**decision, "launch_trial": t.id},
        )  # fmt: skip
        log.info("launch trial %d (%s on workload %s): %s — %s", t.id, lever.describe(), t.workload_id,
                 "promoted" if d.promote else "reverted", d.reason)  # fmt: skip
        if d.promote and d.interval is not None:
            # numbers the launcher reported decided the contract: the policy serves that user only
            reported = any(c.kind == "stdout_metric" for c in job.contract.checks)
            self.library.add_policy(
                t.workload_id,
                lever.values(),
                "validated",
                d.interval.speedup,
                (d.interval.low, d.interval.high),
                {
                    "source": "runs",
                    "launch_trial": t.id,
                    "experiment": e.id,
                    "lever": lever.describe(),
                    "pairs": d.interval.pairs,
                    "runs": [r["job_id"] for r in t.runs],
                    "scheduler_job_ids": sorted(
                        {self.jobs.get(r["job_id"]).scheduler_job_id for r in t.runs} - {""}
                    ),
                    "reason": d.reason,
                    "metric": "run_s: the run's own clock, CUDA initialisation to exit",
                    "predicted_max": t.bound if t.bound != float("inf") else None,
                    "scope_uid": job.uid if reported else None,
                },
                gpu_model=self._gpus[0].name if self._gpus else "",
                driver=self.backend.driver_version() or "",
            )

    def _window_free_pending(self, job_id: str) -> bool:
        """The job's live policy still has a lever that needs no window (WINDOW_FREE_LEVERS)."""
        pending = self._live_pending.get(job_id)
        return pending is not None and any(x.get("lever") in WINDOW_FREE_LEVERS for x in pending[1])

    def _apply_live_policy(self, job_id: str, window_free: bool = False) -> None:
        """A recurring job's validated live levers, applied once its processes are seen (the
        stream, the CPUs found anew in this run) and kept: no experiment, one window at most to
        learn what the lever acts on. A lever whose target is not there within LIVE_POLICY_WINDOWS
        windows is dropped (said in the log). ``window_free``: from the duty tick, with no window,
        only the levers that need none (WINDOW_FREE_LEVERS), and no window counted."""
        with self._live_lock:
            self._apply_live_policy_locked(job_id, window_free)

    def _apply_live_policy_locked(self, job_id: str, window_free: bool) -> None:
        pending = self._live_pending.get(job_id)
        if pending is None:
            return
        pid, items, windows = pending
        job = self.jobs.get(job_id)
        left = []
        for item in items:
            if window_free and item.get("lever") not in WINDOW_FREE_LEVERS:
                left.append(item)
                continue
            if item.get("at_exec"):
                if self._set_at_exec(job, pid, item, left):
                    self._exp_tried.add((job_id, "cpu_affinity"))
                continue
            lever = self._live_lever(item["lever"], job)
            if lever is None:
                left.append(item)
                continue
            lever.setting.update(item.get("setting", {}))
            try:
                iv = self.interventions.apply(job_id, lever, self._target(job_id))
                self.interventions.promote(iv.id, f"policy {pid} of the workload, at launch")
                log.info("job %s: %s from policy %d applied at launch", job_id, lever.describe(), pid)
            except LeverError as e:
                log.warning("job %s: policy %d's %s could not be applied: %s", job_id, pid, lever.name, e)
            self._exp_tried.add((job_id, lever.name))  # known: no experiment on it in this run
        if window_free:
            ticks = self._live_ticks.get(job_id, 0) + 1
            self._live_ticks[job_id] = ticks
            if ticks >= LIVE_POLICY_TICKS:  # its processes have shown for that long: nothing to act on
                for item in [x for x in left if x.get("lever") in WINDOW_FREE_LEVERS]:
                    why = "found nothing to act on; not applied"
                    log.info("job %s: policy %d's %s %s", job_id, pid, item["lever"], why)
                left = [x for x in left if x.get("lever") not in WINDOW_FREE_LEVERS]
            if left:
                self._live_pending[job_id] = [pid, left, windows]
            else:
                self._live_pending.pop(job_id, None)
                self._live_ticks.pop(job_id, None)
            return
        if not left or windows + 1 >= LIVE_POLICY_WINDOWS:
            self._live_pending.pop(job_id, None)
            for item in left:
                log.info(
                    "job %s: policy %d's %s found nothing to act on; not applied", job_id, pid, item["lever"]
                )
        else:
            self._live_pending[job_id] = [pid, left, windows + 1]

    def _set_at_exec(self, job: Job, pid: int, item: dict[str, Any], left: list[dict[str, Any]]) -> bool:
        """A cpu_affinity policy the launch plan carried (``at_exec``): recorded as the policy's
        intervention, reverting to the CPUs the launcher started on, when the job's processes run
        on those CPUs (their launcher set them); otherwise gitmd sets them now (a launcher that does
        not honour LaunchPlan.cpus). False: no process to look at yet (``item`` left)."""
        pids = self._job_pids(job.id)
        if not pids:
            left.append(item)
            return False
        cpus = set(item["at_exec"])
        try:
            ran = all(os.sched_getaffinity(p) == cpus for p in pids)
        except OSError:
            left.append(item)
            return False
        lever = make_lever("cpu_affinity", cpus=sorted(cpus))
        try:
            target = self._target(job.id)
            if ran:
                start = item.get("started_on") or sorted(cpus)
                now = lever.capture(target)
                saved = {part: {k: start for k in now[part]} for part in ("threads", "main")}
                iv = self.interventions.apply(job.id, lever, target, saved=saved)
                self.interventions.promote(
                    iv.id, f"policy {pid} of the workload, set at exec by its launcher"
                )
                log.info(
                    "job %s: %s from policy %d set by its launcher at exec", job.id, lever.describe(), pid
                )
                return True
            iv = self.interventions.apply(job.id, lever, target)
            self.interventions.promote(iv.id, f"policy {pid} of the workload, at launch")
            log.info(
                "job %s: %s from policy %d applied (its launcher did not set it)",
                job.id,
                lever.describe(),
                pid,
            )
        except LeverError as e:
            log.warning("job %s: policy %d's cpu_affinity could not be applied: %s", job.id, pid, e)
        return True

    def _earlier_causes(self, job: Job, report: WindowReport) -> set[str]:
        """The causes above threshold in the window before ``report``'s: of this run, or for its
        first window, the previous run's last one (runs shorter than two windows are common: a 15-s
        job gets a short first window and one full window). Experiments and launch trials act only
        on a cause seen in two windows in a row: one window can be start-up (a model's weights
        copied from pageable memory once look like a pageable-copy cause; a bf16 job's warm-up
        looked like a 25% sync stall on the H200, 2026-12-03, and a CPU experiment ran on it)."""
        now = {c.name for c in report.causes if c.above_threshold}
        first = job.id not in self._trial_causes
        wid, seen, earlier = self._trial_causes.get(job.id, (-1, set(), set()))
        if wid != report.window_id:
            earlier = (
                (self._workload_causes.get(job.workload_id, set()) if job.workload_id else set())
                if first
                else seen
            )
            self._trial_causes[job.id] = (report.window_id, now, earlier)
            if job.workload_id:
                self._workload_causes[job.workload_id] = now
        return earlier

    def _maybe_plan_trial(self, job_id: str) -> None:
        """After a duty window: a cause above threshold that a launch lever addresses plans a
        launch trial for the job's workload (one at a time, one per lever)."""
        cfg = self.config.experiments
        job = self.jobs.get(job_id)
        if not cfg.enabled or not job.workload_id or not self._explorable(job):
            return
        if self.trials.running(job.workload_id) is not None:
            return
        try:
            report = self.attribution(job_id)
        except GitmdError:
            return
        tried = {t.lever for t in self.trials.of_workload(job.workload_id)}
        with self._exp_lock:
            # a live lever is being tried that may remove these causes (contended, H200 2026-12-03:
            # a launch trial planned on launch_bound while cpu_affinity, which addresses it too, was
            # being tried ran on the next launches, the recurring one among them)
            live_on = self._exp_cause.get(job_id, set())
        reported = any(c.kind == "stdout_metric" for c in job.contract.checks)
        # A trial costs the workload's next runs: plan only for a cause seen in two windows in a row
        earlier = self._earlier_causes(job, report)
        for cause in report.causes:
            if not cause.above_threshold or cause.name not in earlier or cause.name in live_on:
                continue
            for name in cause.levers:
                if name not in cfg.launch_levers or name in tried:
                    continue
                lever = make_lever(name)
                if not isinstance(lever, EnvLever):
                    continue
                if lever.live_form in cfg.live_levers and (job_id, lever.live_form) in self._exp_tried:
                    continue  # tried within the run: its outcome stands for the launch form too
                if lever.risk is Risk.NUMERICS and not reported:
                    continue  # its numbers could not be compared across runs (payloads come per window)
                t = self.trials.plan(job.workload_id, lever, cause.name, cause.ceiling)
                if t is not None:
                    log.info(
                        "workload %s: %s costs %.0f%% of run %s (at most %.0f%%); its next launches try %s "
                        "(launch trial %d)", job.workload_id, cause.name, 100 * cause.share, job_id,
                        100 * cause.ceiling, lever.describe(), t.id,
                    )  # fmt: skip
                return

    def _view(self, job: Job) -> JobView:
        procs = self.capture.processes(job.id) if self.capture is not None else []
        jc = self.capture.get(job.id) if self.capture is not None else None
        started = bool(procs) and job.state == "registered"
        if started:
            self.jobs.set_state(job.id, "running")
            job = self.jobs.get(job.id)
        if job.state in ("exited", "lost"):
            view = _stored_view(job)
        else:
            view = JobView(
                job, procs, self._windows(job.id, jc), self._steps.get(job.id), self._policies.get(job.id, 0)
            )
        if started:
            self._publish("running", view)
        return view

    def _publish(self, kind: str, view: JobView) -> None:
        self.job_events.publish(JobEvent(kind, time.time_ns(), view))

    def watch_jobs(self, job_id: str) -> Watch[JobEvent]:
        if job_id:
            self.jobs.get(job_id)  # NOT_FOUND for an unknown job
        return self.job_events.watch(self.alive, (lambda e: e.view.job.id == job_id) if job_id else None)

    def get_job(self, id_or_name: str) -> JobView:
        if not id_or_name:
            raise InvalidArgumentError("a job id or name is required")
        return self._view(self.jobs.get(id_or_name))

    def list_jobs(self, include_exited: bool, scheduler_job_id: str = "") -> list[JobView]:
        return [self._view(j) for j in self.jobs.list(include_exited, scheduler_job_id)]

    def close_scheduler_job(self, scheduler_job_id: str, exit_code: int) -> list[JobView]:
        """Every open gitmd job of a scheduler's job ends with its exit code (Slurm's Epilog)."""
        if not scheduler_job_id:
            raise InvalidArgumentError("a scheduler job id is required")
        return [
            self.report_exit(j.id, exit_code)
            for j in self.jobs.list(include_exited=False, scheduler_job_id=scheduler_job_id)
        ]

    def untracked_processes(self) -> list[UntrackedProcess]:
        tracked: set[int] = set()
        if self.capture is not None:
            for job_id in self.capture.job_ids():
                tracked |= {status.pid for status, _ in self.capture.processes(job_id)}
        return untracked(self.sampler.latest(), tracked, os.getpid())

    def _run_s(self, job_id: str) -> float | None:
        """The run's length by its own clock: from its first process's CUDA initialisation (its ring's
        creation) to its last process's exit (now, when one is still alive or its exit was not
        seen). None: no process of it initialised CUDA under the shim."""
        if self.capture is None:
            return None
        span = self.capture.lifetime_ns(job_id)
        return None if span is None else (span[1] - span[0]) / 1e9

    def _crash(self, job_id: str, exit_code: int | None) -> str:
        """ "may be gitmd's: ..." when the run died by a signal (crashes.crash_signal) while gitmd had
        something in force on it; "" otherwise. Marks its workload: its next runs go plainly."""
        sig = crash_signal(exit_code)
        if not sig:
            return ""
        job = self.jobs.get(job_id)
        in_force = []
        if job.capture:
            in_force.append("the shim and free guard loaded")
            n = self._windows(job_id)
            if n:
                in_force.append(f"{n} capture window(s)")
            detached = (
                sum(1 for st, _ in self.capture.processes(job_id) if st.detaches) if self.capture else 0
            )
            if detached:
                in_force.append(f"CUPTI detached in {detached} process(es)")
        if job_id in self._trial_runs:
            in_force.append(f"a run of launch trial {self._trial_runs[job_id]}")
        if self._policies.get(job_id):
            in_force.append(f"policy {self._policies[job_id]}")
        live = [
            iv.lever
            for iv in self.interventions.list(job_id)
            if iv.state in ("applying", "applied", "promoted")
        ]
        if live:
            in_force.append("live change(s) " + ", ".join(sorted(set(live))))
        if not in_force:
            return ""
        why = f"may be gitmd's: died of {signal_name(sig)} with " + "; ".join(in_force)
        self.crashes.mark(job.workload_id, job.launch_key, job_id, why)
        log.warning(
            "job %s (%s) %s; its program's next runs go without gitmd's capture until one ends cleanly",
            job_id, job.name, why,
        )  # fmt: skip
        return why

    def report_exit(
        self, job_id: str, exit_code: int, metrics: dict[str, list[float]] | None = None
    ) -> JobView:
        self._end_experiments(job_id, "the job exited")
        run_s = self._run_s(job_id)
        crash = self._crash(job_id, exit_code)
        try:
            self._trial_run_ended(job_id, exit_code, metrics or {}, run_s, crash)
        except Exception:
            log.exception("recording job %s's run of its launch trial failed", job_id)
        self._untrack(job_id)
        self._forget(job_id)
        out = self._outcome(job_id)
        view = self._ended(self.jobs.exited(job_id, exit_code, run_s=run_s, crash=crash, **out))
        job = view.job
        if exit_code == 0 and not job.capture and self.crashes.clear(job.workload_id, job.launch_key):
            log.info(
                "job %s (%s) ran clean without gitmd's capture: capture resumes for its program",
                job.id,
                job.name,
            )
        self._publish("exited", view)
        return view

    # -- capture -------------------------------------------------------------------------------
    def trace_job(self, id_or_name: str, duration_s: float, raw: bool = False) -> TraceResult:
        if not 0 <= duration_s <= MAX_TRACE_S:
            raise InvalidArgumentError(f"duration must be 0..{MAX_TRACE_S:g} s")
        job = self.get_job(id_or_name).job
        if self.capture is None or not job.capture:
            raise InvalidArgumentError(f"job {job.id} ({job.name}) runs without the shim: nothing to trace")
        if job.state in ("exited", "lost"):
            raise InvalidArgumentError(f"job {job.id} ({job.name}) has ended ({job.state})")
        if self.capture.get(job.id) is None:
            raise GitmdError(f"job {job.id} is not tracked by capture (was gitmd restarted?)")
        window = self.capture.capture(job.id, duration_s or self.config.capture.window_duration_s)
        steps = self._after_window(window)
        tl = timeline_mod.build(window)
        if raw:
            data = capture_file.dumps(window)
        else:
            samples, _ = self.telemetry_store.query(
                None, tl.start_real_ns - 10**9, tl.end_real_ns + 10**9, 100_000
            )
            data = dumps(to_chrome_trace(tl, samples))
        summary = {
            "job_id": job.id,
            "window_id": tl.window_id,
            "processes": len(tl.processes),
            "kernels": tl.count("kernels"),
            "memcpys": tl.count("memcpys"),
            "memsets": tl.count("memsets"),
            "syncs": tl.count("syncs"),
            "memory_ops": tl.count("memory"),
            "ring_drops": sum(p.ring_drops for p in tl.processes),
            "cupti_drops": sum(p.cupti_drops for p in tl.processes),
            "window_s": (tl.end_real_ns - tl.start_real_ns) / 1e9,
            "notes": tl.notes,
            "step": steps,
        }
        return TraceResult((data[i : i + TRACE_CHUNK] for i in range(0, len(data), TRACE_CHUNK)), summary)

    def attribution(self, id_or_name: str, window_id: int = 0) -> WindowReport:
        """A window of the job analysed: the latest (taken now if there is none yet), or one of the
        REPORTS_KEPT latest reports by window id."""
        job = self.get_job(id_or_name).job
        kept = self._reports.setdefault(job.id, {})
        if window_id and window_id in kept:
            return kept[window_id]
        jc = self.capture.get(job.id) if self.capture is not None else None
        if jc is None and job.state in ("exited", "lost"):
            code = f", exit {job.exit_code}" if job.exit_code is not None else ""
            crash = f"; {job.crash}" if job.crash else ""
            raise InvalidArgumentError(
                f"job {job.id} ({job.name}) has ended ({job.state}{code}{crash}); gitmd keeps the reports "
                "of running jobs only: `gitmctl job` shows what its run came to"
            )
        if jc is None:
            raise InvalidArgumentError(f"job {job.id} ({job.name}) is not captured: nothing to explain")
        window = jc.last
        if window is None:
            assert self.capture is not None
            window = self.capture.capture(job.id, self.config.capture.window_duration_s)
            self._after_window(window)
        if window_id and window_id != window.window_id:
            held = sorted({*kept, window.window_id})
            raise NotFoundError(
                f"window {window_id} of job {job.id} is not held; gitmd keeps the latest window and "
                f"the reports it made: {', '.join(map(str, held))}"
            )
        if window.window_id in kept:
            return kept[window.window_id]
        report = window_report(window, history=self._history.get(job.id), tester=self.granger)
        kept[window.window_id] = report
        for old in sorted(kept)[:-REPORTS_KEPT]:
            del kept[old]
        return report

    def duty_cycle(self) -> None:
        """One window for every tracked job that has a live process and no window open now."""
        if self.capture is None:
            return
        now = time.monotonic()
        for job_id in self.capture.job_ids():
            jc = self.capture.get(job_id)
            if jc is None or jc.lock.locked() or now < jc.next_due_mono:
                continue  # a window open, or not due: the period is stretched to hold the overhead budget
            with self._exp_lock:
                if job_id in self._exp_running:
                    continue  # its experiment opens the windows it needs
            procs = self.capture.processes(job_id)
            if not any(alive for _, alive in procs):
                continue
            if self._window_free_pending(job_id):  # no window needed (it samples CPUs: off the tick)
                self._duty_pool.submit(functools.partial(self._apply_live_policy, window_free=True), job_id)
            if job_id in self._trial_runs:
                continue  # measured by its own clock: CUPTI never attached to either arm
            if not self.capture.observable(job_id):
                continue  # every live process's observation has ended
            if jc.windows == 0 and self._unsettled(job_id, procs):
                continue  # a known-long job: its first window waits for its processes to settle
            self._duty_pool.submit(self._duty_window, job_id)

    def _duty_window(self, job_id: str) -> None:
        assert self.capture is not None
        c = self.config.capture
        jc = self.capture.get(job_id)
        duration = c.window_duration_s
        probe = jc is not None and jc.period_s == 0.0 and 0 < c.first_window_s < duration
        if probe:
            duration = c.first_window_s  # its launch rate is unknown yet: see duty.py
        period_now = max(jc.period_s if jc is not None else 0.0, c.window_every_s)
        cap = duty.window_records(period_now, c.overhead_budget, c.launch_cost_us)
        try:
            w = self.capture.capture(job_id, duration, max_records=cap)
        except KeyError:
            return  # the job exited meanwhile
        except Exception:
            log.exception("capture window of job %s failed", job_id)
            return
        self._after_window(w)
        try:
            self._apply_live_policy(job_id)
            self._maybe_experiment(job_id)
            self._maybe_plan_trial(job_id)
        except Exception:
            log.exception("planning an experiment on job %s failed", job_id)
        kernels = sum(len(p.records.kernels) for p in w.processes)
        window_s = (w.end_real_ns - w.start_real_ns) / 1e9
        period = duty.next_period(
            kernels, window_s, c.window_every_s, c.overhead_budget, c.launch_cost_us, c.window_duration_s
        )
        jc = self.capture.get(job_id)
        if jc is None:
            return
        if not self._settled(job_id) or jc.windows < c.session_windows:
            # start-up, or the process's observation under way: the next window comes a tick later.
            # Once a window has opened, CUPTI stays attached to the process (its activity off) until
            # its observation ends, and costs a launch-bound job between windows nearly what an open
            # window does (~4 against ~6 us a launch, H200): spacing the windows out only makes that
            # last longer. Each window stays capped by the budget (window_records).
            period = duty.TICK_S
        if period > c.window_every_s and abs(period - jc.period_s) > 0.1 * period:
            log.info(
                "job %s: %.0f kernel launches/s; a window every %.0f s keeps capture within %.1f%%",
                job_id,
                kernels / max(window_s, 1e-9),
                period,
                100 * c.overhead_budget,
            )
        jc.period_s = period
        # due half a tick early, so that a period is never a tick late
        jc.next_due_mono = time.monotonic() + period - min(c.window_every_s, duty.TICK_S) / 2
        with self._exp_lock:
            busy = job_id in self._exp_running  # its experiment opens the windows it needs
        if busy:
            return
        if self._end_observation_if_done(job_id):
            return
        if probe and period <= c.window_every_s:  # a full window fits the budget: now, not a period later
            self._duty_pool.submit(self._duty_window, job_id)

    def _observation_done(self, job_id: str) -> bool:
        """gitmd has seen enough of the job's processes: capture.session_windows windows analysed,
        past start-up, no experiment on it, and no live lever left that acts through a window."""
        jc = self.capture.get(job_id) if self.capture is not None else None
        if jc is None or jc.windows < self.config.capture.session_windows or not self._settled(job_id):
            return False
        with self._exp_lock:
            if job_id in self._exp_running:
                return False
        pending = self._live_pending.get(job_id)
        return not (pending and any(x.get("lever") not in WINDOW_FREE_LEVERS for x in pending[1]))

    def _end_observation_if_done(self, job_id: str) -> bool:
        """When the job's observation is done its processes get no window again, and their shims are
        told (they detach CUPTI then, once, only with capture.detach_cupti). True: it ended."""
        if self.capture is None or not self._observation_done(job_id):
            return False
        answers = self.capture.end_observation(job_id)
        if answers:
            log.info(
                "job %s: observation ended after %d windows, no more windows (%s)",
                job_id,
                self._windows(job_id),
                ", ".join(f"pid {p}: {a}" for p, a in sorted(answers.items())),
            )
        return True

    def reap(self, now_ns: int | None = None) -> list[str]:
        """End jobs whose launcher never reported: every process gone for REAP_AFTER_S, or never
        started within EXPIRE_UNSTARTED_S. Their captures are closed and directories removed."""
        now_ns = now_ns or time.time_ns()
        ended = []
        for job in self.jobs.list(include_exited=False):
            if job.scheduler_closes and now_ns - job.created_ns < SCHEDULER_JOB_MAX_S * 1e9:
                continue  # its scheduler reports the end (Slurm's Epilog)
            procs = self.capture.processes(job.id) if self.capture is not None else []
            if procs:
                if any(alive for _, alive in procs):
                    self._all_dead_since.pop(job.id, None)
                    continue
                since = self._all_dead_since.setdefault(job.id, now_ns)
                if now_ns - since < REAP_AFTER_S * 1e9:
                    continue
                why = "all its processes ended and no launcher reported"
            elif now_ns - job.created_ns < EXPIRE_UNSTARTED_S * 1e9:
                continue
            else:
                why = f"registered {EXPIRE_UNSTARTED_S:.0f} s ago and no process ever started"
            self._end_experiments(job.id, "the job was lost")
            self._trial_run_ended(job.id, None, {}, None, "")
            if self.capture is not None:
                self._untrack(job.id)
                self._forget(job.id)
            lost = self.jobs.exited(job.id, LOST_EXIT_CODE, state="lost", **self._outcome(job.id))
            self._publish("lost", self._ended(lost))
            log.info("job %s (%s) lost: %s", job.id, job.name, why)
            ended.append(job.id)
        return ended

    def _windows(self, job_id: str, jc: JobCapture | None = None) -> int:
        """Capture windows the job had: counted live while it is tracked, kept after it ends."""
        if jc is None and self.capture is not None:
            jc = self.capture.get(job_id)
        return jc.windows if jc is not None else self._windows_done.get(job_id, 0)

    def _untrack(self, job_id: str) -> None:
        if self.capture is None:
            return
        jc = self.capture.get(job_id)
        if jc is not None:
            self._windows_done[job_id] = jc.windows
        self.capture.untrack(job_id)

    def _outcome(self, job_id: str) -> dict[str, Any]:
        """What the ending job's run came to, for the store (JobRegistry.exited): from memory, or
        what was stored when it ended before (a second report of its exit)."""
        job = self.jobs.get(job_id)
        steps = self._steps.get(job_id)
        return {
            "windows": self._windows(job_id) or job.windows,
            "policy_id": self._policies.get(job_id, 0) or job.policy_id,
            "steps": json.dumps(dataclasses.asdict(steps)) if steps is not None else job.steps,
        }

    def _ended(self, job: Job) -> JobView:
        """An ended job's view, from the store; what memory held of it is dropped (a daemon that runs
        for months keeps only its running jobs there)."""
        self._windows_done.pop(job.id, None)
        self._policies.pop(job.id, None)
        self._steps.pop(job.id, None)
        self._fingerprinted.discard(job.id)
        self._all_dead_since.pop(job.id, None)
        self._exp_tried.difference_update([t for t in list(self._exp_tried) if t[0] == job.id])
        return _stored_view(job)

    def _forget(self, job_id: str) -> None:
        self._live_pending.pop(job_id, None)
        self._live_ticks.pop(job_id, None)
        self._trial_causes.pop(job_id, None)
        self._steady.discard(job_id)
        self._settling.discard(job_id)
        self._history.pop(job_id, None)
        self._newest.pop(job_id, None)
        self._reports.pop(job_id, None)

    def _keep_window(self, window: WindowResult) -> None:
        """capture.keep_windows: the window written under the state directory, the job's oldest
        beyond that many removed. A failure is logged, never raised: diagnosis only."""
        keep = self.config.capture.keep_windows
        if keep <= 0:
            return
        d = self.config.daemon.state_dir / "windows" / window.job_id
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(d.parent, 0o700)
            tmp = d / f".{window.window_id}.npz.tmp"
            tmp.write_bytes(capture_file.dumps(window))
            os.replace(tmp, d / f"{window.window_id}.npz")
            kept = sorted(d.glob("*.npz"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
            for old in kept[:-keep]:
                old.unlink(missing_ok=True)
        except OSError as e:
            log.warning("window %d of job %s not kept: %s", window.window_id, window.job_id, e)

    def _after_window(self, window: WindowResult) -> JobSteps | None:
        """Steps and fingerprint of a finished window (when it shows them); always a "window" event."""
        self._keep_window(window)
        prev = self._newest.get(window.job_id)
        if prev is not None and prev is not window:
            add_to_history(self._history.setdefault(window.job_id, History()), prev)
        self._newest[window.job_id] = window
        steps = job_steps(window)
        job = self.jobs.get(window.job_id)
        if steps is not None:
            self._steps[window.job_id] = steps
            found = steps.stats.found and steps.stats.steps > 0
            if found:
                self._steady.add(window.job_id)
            main = next(p for p in window.processes if p.pid == steps.pid)
            sig = signature(main.records, steps.stats)
            # A job identified already is not fingerprinted again while gitmd has changed it (an
            # experiment's treatment, a promoted lever): its step looks different then, and would
            # be taken for another workload — its policy stored there, never found at the next launch.
            if sig is not None and job.workload_id and self._changed(job.id):
                sig = None
            if sig is not None:
                first = window.job_id not in self._fingerprinted
                workload_id = self.library.observe(sig, job.launch_key, job.name, new_run=first)
                self._fingerprinted.add(window.job_id)
                if workload_id != job.workload_id:
                    self.jobs.set_workload(job.id, workload_id)
                    job = self.jobs.get(job.id)
        self._publish("window", self._view(job))
        return steps

    def _settled(self, job_id: str) -> bool:
        """Past start-up: a window has found the job's step, or STARTUP_WINDOWS windows have not
        (a job whose step is never found is judged on its windows all the same)."""
        if job_id in self._steady:
            return True
        jc = self.capture.get(job_id) if self.capture is not None else None
        return jc is not None and jc.windows >= duty.STARTUP_WINDOWS

    def _explorable(self, job: Job) -> bool:
        """What live experiments and launch-trial planning both ask of a job: its registration
        allows exploration, it did not get its workload's policy (_known), and it is past start-up
        (_settled) — start-up is not its steady state: weights copied from pageable memory for
        seconds look like a cause, and transformer's first window looked launch-bound (H200,
        2026-12-03: a CPU experiment ran on its start-up)."""
        return job.allow_exploration and not self._known(job.id) and self._settled(job.id)

    def _known(self, job_id: str) -> bool:
        """The job got its workload's validated policy at launch and, by default, nothing else:
        the recurring case runs with zero experiment windows (contended and transformer, H200
        2026-12-03: a launch with the policy was explored again for what remained of its cause)."""
        return bool(self._policies.get(job_id)) and not self.config.experiments.explore_known

    def _changed(self, job_id: str) -> bool:
        """Something gitmd applied is in force on the job: a policy or a launch trial's arm at
        launch, a live experiment or lever now."""
        if self._policies.get(job_id) or job_id in self._trial_runs:
            return True
        with self._exp_lock:
            if job_id in self._exp_running:
                return True
        return any(iv.state in ("applying", "applied", "promoted") for iv in self.interventions.list(job_id))

    # -- library -------------------------------------------------------------------------------
    def workloads(self) -> list[Workload]:
        return self.library.list()

    def workload(self, workload_id: str) -> Workload:
        return self.library.get(workload_id)

    def pin_policy(self, policy_id: int, who: str) -> Policy:
        return self.library.pin(policy_id, who)

    def unpin_policy(self, policy_id: int) -> Policy:
        return self.library.unpin(policy_id)

    def revert_policy(self, policy_id: int) -> Policy:
        return self.library.revert(policy_id)

    def export_library(self) -> bytes:
        return json.dumps(self.library.export(), indent=1).encode()

    def import_library(self, document: bytes) -> tuple[int, int]:
        return self.library.import_(document)

    # -- experiments -----------------------------------------------------------------------------
    def _maybe_experiment(self, job_id: str) -> None:
        """After a duty window: if its top cause selects a live lever not tried on this job yet, and
        the job allows exploration, run one experiment (one per job at a time)."""
        cfg = self.config.experiments
        if not cfg.enabled or self.capture is None or not self.alive.is_set():
            return
        with self._exp_lock:
            if job_id in self._exp_running:
                return
        if job_id in self._trial_runs:
            return  # a run of a launch trial: nothing else may change under it
        job = self.jobs.get(job_id)
        if job.state not in ("registered", "running") or not self._explorable(job):
            return
        try:
            report = self.attribution(job_id)
        except GitmdError:
            return
        earlier = self._earlier_causes(job, report)
        top = next((c for c in report.causes if c.above_threshold and c.name in earlier), None)
        if top is None:
            return
        # One try per (job, lever), also across gitmd restarts: the experiments table remembers.
        self._exp_tried |= {(job_id, e.lever) for e in self.experiments.of_job(job_id)}
        for name in top.levers:
            if name not in cfg.live_levers or (job_id, name) in self._exp_tried:
                continue
            lever = self._live_lever(name, job)
            if lever is None:
                continue
            with self._exp_lock:
                if job_id in self._exp_running:
                    return
                cancel = threading.Event()
                self._exp_running[job_id] = cancel
                self._exp_cause[job_id] = {top.name, *lever.causes}
                self._exp_tried.add((job_id, name))
            log.info(
                "job %s: %s costs %.0f%% of its time; trying %s",
                job_id,
                top.name,
                100 * top.share,
                lever.describe(),
            )
            self._exp_pool.submit(self._run_experiment, job_id, lever, top.name, cancel, top.ceiling)
            return

    def _job_pids(self, job_id: str) -> tuple[int, ...]:
        if self.capture is None:
            return ()
        return tuple(st.pid for st, alive in self.capture.processes(job_id) if alive)

    def _near_cpus(self, job: Job) -> set[int]:
        """The CPUs near the job's GPUs (all of them when it did not say which)."""
        local: set[int] = set()
        for g in self._gpus:
            if not job.gpus or g.index in job.gpus:
                local |= gpu_local_cpus(g.pci_bus_id)
        return local

    def _exec_cpus(self, job: Job, start: tuple[int, ...], items: list[dict[str, Any]]) -> tuple[int, ...]:
        """A validated cpu_affinity policy, set by the launcher before exec: quiet CPUs near the GPU,
        chosen now as the live lever chooses them (among gitmd's CPUs, not only the ones the job
        was started on: a job squeezed onto busy cores is moved off them), as many as it takes (2-8,
        by ``start``, the launcher's affinity). Applied from the job's first instruction, as the oracle
        runs it (taskset), not a duty tick after its first CUDA call (contended, H200 2026-12-03:
        policy runs 0.118-0.136 ms/step against the oracle's 0.078-0.089: their import and first
        steps ran on the contended cores). Noted on the policy's pending item (``at_exec``), so the
        tick sets the same CPUs when the launcher did not."""
        item = next((x for x in items if x.get("lever") == "cpu_affinity"), None)
        start = tuple(c for c in start if c < (os.cpu_count() or 0))  # CPUs this host has
        if item is None or not start:
            return ()
        try:
            cpus = quiet_cpus(
                max(2, min(len(start), 8)), prefer=self._near_cpus(job), interval_s=0.1, load=self.cpu_load
            )
        except OSError:
            return ()
        if not cpus or cpus == set(start):
            return ()
        item["at_exec"], item["started_on"] = sorted(cpus), sorted(start)
        return tuple(sorted(cpus))

    def _live_lever(self, name: str, job: Job) -> Lever | None:
        pids = self._job_pids(job.id)
        if not pids:
            return None
        if name == "sched_priority":
            return make_lever("sched_priority", nice=-5) if os.geteuid() == 0 else None
        if name == "cpu_affinity":
            try:
                current = os.sched_getaffinity(pids[0])
            except OSError:
                return None
            cpus = quiet_cpus(max(2, min(len(current), 8)), prefer=self._near_cpus(job), load=self.cpu_load)
            if not cpus or set(cpus) == current:
                return None
            return make_lever("cpu_affinity", cpus=sorted(cpus))
        if name == "pin_host_buffer":
            window = self._newest.get(job.id)
            if window is None or self.capture is None:
                return None
            rings = self.capture.ring_paths(job.id)
            best: tuple[int, int, list[HotBuffer]] | None = None
            for p in window.processes:
                if p.pid not in rings:
                    continue
                pin = to_pin(hot_pageable_buffers(p.records))
                saving = sum(b.pageable_ns for b in pin)
                if pin and (best is None or saving > best[0]):
                    best = (saving, p.pid, pin)
            if best is None:
                return None
            _, pid, pin = best
            return make_lever("pin_host_buffer", pid=pid, buffers=[[b.address, b.bytes] for b in pin])
        if name == "cotenant_yield":
            bg = self._background_cotenants(job)
            capture = self.capture
            if capture is None:
                return None
            yielding = sorted(
                p for b in bg for p in set(self._job_pids(b.id)) & set(capture.ring_paths(b.id))
            )
            if not yielding:
                return None
            jobs = [b.id for b in bg]
            return make_lever("cotenant_yield", pids=yielding, jobs=jobs, share=750, period_ms=100)
        if name == "alloc_keep_cache_live":
            return self._keep_cache(job)
        if name in ("stream_priority", "mempool_release", "sync_spin"):
            main = self._busiest(job, "kernels")  # the one whose stream the cause names
            if main is None:
                return None
            if name == "stream_priority":
                cost, stream, _ = starved_stream(main.records)
                if cost <= 0:
                    return None
                return make_lever("stream_priority", pid=main.pid, stream=stream, priority=-5)
            devices = main.records.kernels["device"]
            device = int(np.bincount(devices).argmax()) if len(devices) else 0
            if name == "sync_spin":
                return self._sync_spin(job, main.pid, device)
            return make_lever("mempool_release", pid=main.pid, device=device)
        return None

    def _busiest(self, job: Job, kind: str) -> ProcessWindow | None:
        """The job's live captured process with the most records of ``kind`` (kernels, memory) in
        its newest window; None without a window or such a process."""
        window = self._newest.get(job.id)
        if window is None or self.capture is None:
            return None
        rings = self.capture.ring_paths(job.id)
        procs = [p for p in window.processes if p.pid in rings and len(getattr(p.records, kind))]
        return max(procs, key=lambda p: len(getattr(p.records, kind))) if procs else None

    def _keep_cache(self, job: Job) -> Lever | None:
        """The job's process whose gitmd hook has read the keep-cache flag most (it calls
        torch.cuda.empty_cache() under GITMD_LIVE_FLAGS), asked through each process's shim: no
        window needed. None when no hook reads it: a flag nobody reads would change nothing, and the
        launch form is then tried across runs instead."""
        target = self._target(job.id)
        best: tuple[int, Lever] | None = None
        for pid in self._job_pids(job.id):
            if pid not in target.rings:
                continue
            lever = make_lever("alloc_keep_cache_live", pid=pid)
            assert isinstance(lever, AllocKeepCacheLive)
            try:
                _, reads = lever.read(target)
            except LeverError as e:
                log.debug("job %s: alloc_keep_cache_live: %s", job.id, e)
                continue
            if reads and (best is None or reads > best[0]):
                best = (reads, lever)
        if best is None:
            log.debug("job %s: alloc_keep_cache_live: no hook in its processes reads the flag", job.id)
            return None
        return best[1]

    def _sync_spin(self, job: Job, pid: int, device: int) -> Lever | None:
        """Only a context that sleeps in its synchronizations (yield or blocking sync) can gain:
        auto already spins while the host has more cores than contexts."""
        lever = make_lever("sync_spin", pid=pid, device=device, sched=SyncSpin.SPIN)
        assert isinstance(lever, SyncSpin)
        try:
            now = lever.current(self._target(job.id))
        except LeverError as e:
            log.info("job %s: sync_spin not tried: %s", job.id, e)
            return None
        return lever if now in SyncSpin.SLEEPING else None

    def _target(self, job_id: str) -> Target:
        job = self.jobs.get(job_id)
        rings = self.capture.ring_paths(job_id) if self.capture is not None else {}
        others: dict[int, int] = {}
        for bg in self._background_cotenants(job):
            for pid, path in self.capture.ring_paths(bg.id).items() if self.capture is not None else ():
                rings.setdefault(pid, path)
                others[pid] = bg.uid
        return Target(
            job_id=job_id, pids=self._job_pids(job_id), rings=rings, owner_uid=job.uid, ring_uids=others
        )

    def _background_cotenants(self, job: Job) -> list[Job]:
        """Running jobs registered as background that share a GPU with ``job`` (a job that named
        no GPUs shares them all) and have live captured processes."""
        if self.capture is None or job.background:
            return []
        out = []
        for other in self.jobs.list(include_exited=False):
            if other.id == job.id or not other.background:
                continue
            if job.gpus and other.gpus and not set(job.gpus) & set(other.gpus):
                continue
            if self._job_pids(other.id) and self.capture.ring_paths(other.id):
                out.append(other)
        return out

    def renew_yields(self) -> None:
        """Every few seconds: the co-tenant yields in force are renewed (each lifts itself
        YIELD_EXPIRY_S after its last renewal); one whose foreground job ended is reverted."""
        for iv in self.interventions.in_force("cotenant_yield"):
            try:
                job = self.jobs.get(iv.job_id)
            except NotFoundError:
                job = None
            try:
                if job is None or job.state not in ("registered", "running"):
                    if iv.state == "promoted":
                        self.interventions.unpromote(iv.id)
                    self.interventions.revert(iv.id, "the job it yielded to ended")
                    continue
                lever = make_lever(iv.lever, **iv.setting)
                lever.apply(self.interventions.rebuild(iv.target))
            except (LeverError, GitmdError) as e:
                log.info("co-tenant yield %d: %s", iv.id, e)

    def _run_experiment(
        self, job_id: str, lever: Lever, cause: str, cancel: threading.Event, cause_share: float | None = None
    ) -> None:
        cfg = self.config.experiments
        assert self.capture is not None
        capture = self.capture

        def measure() -> Measurement | None:
            if cancel.is_set():
                return None
            try:
                w = capture.capture(job_id, self.config.capture.window_duration_s)
            except KeyError:
                return None  # the job ended
            steps = self._after_window(w)
            values: tuple[float, ...] = ()
            if steps is not None:
                main = next(p for p in w.processes if p.pid == steps.pid)
                values = tuple(float(x) for x in payload_scalars(main.records))
            step_ms, busy = step_timing(w, steps)
            return Measurement(w.window_id, step_ms, values, busy)

        try:
            exp = LiveExperiment(
                self.experiments,
                self.interventions,
                job_id,
                lever,
                cause,
                target=lambda: self._target(job_id),
                measure=measure,
                rounds=cfg.rounds,
                settle_s=cfg.settle_s,
                min_gain=cfg.min_gain,
                cancel=cancel,
                early_speedup=cfg.early_speedup,
                cause_share=cause_share,
            )
            d = exp.run()
            if d.promote and d.interval is not None:
                self._store_live_policy(job_id, lever, exp.exp.id, d)
        except Exception:
            log.exception("experiment on job %s failed; its interventions were reverted", job_id)
        finally:
            with self._exp_lock:
                self._exp_running.pop(job_id, None)
                self._exp_cause.pop(job_id, None)
            job = self.jobs.get(job_id)
            self._publish("experiment", self._view(job))
            try:
                self._end_observation_if_done(job_id)
            except Exception:
                log.exception("ending the observation of job %s failed", job_id)

    def _store_live_policy(self, job_id: str, lever: Lever, experiment_id: int, d: Decision) -> None:
        """A promoted live lever becomes a policy of the job's workload (its intent, not its
        target): the next run gets it as soon as its processes are seen."""
        job = self.jobs.get(job_id)
        if not job.workload_id or lever.name not in LIVE_POLICY_LEVERS or d.interval is None:
            return
        intent = {k: v for k, v in lever.setting.items() if k in LIVE_POLICY_LEVERS[lever.name]}
        p = self.library.add_policy(
            job.workload_id,
            {},
            "validated",
            d.interval.speedup,
            (d.interval.low, d.interval.high),
            {
                "source": "live",
                "experiment": experiment_id,
                "job_id": job_id,
                "lever": lever.describe(),
                "pairs": d.interval.pairs,
                "reason": d.reason,
                "scope_uid": None,  # gitmd measured it from its own windows
                "scheduler_job_id": job.scheduler_job_id,
            },
            gpu_model=self._gpus[0].name if self._gpus else "",
            driver=self.backend.driver_version() or "",
            live=[{"lever": lever.name, "setting": intent}],
        )
        log.info(
            "workload %s: %s stored as policy %d for its next runs", job.workload_id, lever.describe(), p.id
        )

    def _end_experiments(self, job_id: str, why: str) -> None:
        with self._exp_lock:
            cancel = self._exp_running.get(job_id)
        if cancel is not None:
            cancel.set()
        self.interventions.revert_all(why, job_id)

    def record_tune(
        self,
        job_id: str,
        metric: str,
        levers: list[TunedLever],
        min_gain: float,
        scope_uid: int | None,
        actor: str,
    ) -> tuple[list[Experiment], Policy | None, str, str]:
        """`gitmctl tune`'s trials: decided here from the figures, kept as experiments of the
        reference job; the best promoted lever becomes a validated policy of its workload (scoped to
        ``scope_uid`` when given). Returns (experiments, policy, workload id, note)."""
        job = self.jobs.get(job_id)
        if not levers:
            raise InvalidArgumentError("no levers in the tune result")
        if len(levers) > len(CATALOG):
            raise InvalidArgumentError(f"at most {len(CATALOG)} levers in one tune result")
        if not 0 <= min_gain < 1 or not math.isfinite(min_gain):
            raise InvalidArgumentError("min_gain must be in [0, 1)")
        gain = min_gain or self.config.experiments.min_gain
        checked = [(t, *tune_lever(t)) for t in levers]  # every lever valid before anything is written
        exps: list[Experiment] = []
        best: tuple[float, Experiment, Lever, Decision] | None = None
        for t, lever, (a, b) in checked:
            verdict = Verdict(not t.failures, tuple(t.failures), tuple(t.checked), t.numbers_checked)
            d = decide(a, b, verdict, lever.risk, gain, paired=True)
            arms = [
                {"arm": arm, "window_id": 0, "step_ms": value, "at_ns": time.time_ns(), "job_id": jid}
                for arm, value, jid in t.trials
            ]
            e = self.experiments.record(
                job.id, lever, "tune", "promoted" if d.promote else "reverted", arms,
                {**decision_json(d), "metric": metric, "checked": list(t.checked)},
            )  # fmt: skip
            exps.append(e)
            if d.promote and d.interval is not None and (best is None or d.interval.speedup > best[0]):
                best = (d.interval.speedup, e, lever, d)
        policy, note = None, ""
        if best is None:
            note = "no lever was measurably faster with the outputs unchanged: nothing stored"
        elif not job.workload_id:
            note = (
                "not stored: gitmd never saw this job's steps (no capture window found them), so it "
                "has no workload to attach the policy to; run longer trials"
            )
        else:
            _, e, won, d = best
            assert d.interval is not None and isinstance(won, EnvLever)
            gpu = self._gpus[0].name if self._gpus else ""
            policy = self.library.add_policy(
                job.workload_id,
                won.values(),
                "validated",
                d.interval.speedup,
                (d.interval.low, d.interval.high),
                {
                    "source": "tune",
                    "experiment": e.id,
                    "job_id": job.id,
                    "lever": won.describe(),
                    "pairs": d.interval.pairs,
                    "metric": metric,
                    "reason": d.reason,
                    "scope_uid": scope_uid,
                    "by": actor,
                    "scheduler_job_id": job.scheduler_job_id,
                },
                gpu_model=gpu,
                driver=self.backend.driver_version() or "",
            )
            note = f"stored as policy {policy.id} of workload {job.workload_id}" + (
                f" for uid {scope_uid}'s launches" if scope_uid is not None else " for every launch"
            )
        self.audit.append(
            audit_row(actor, None, "tune", "ok", job.id, {"experiments": [e.id for e in exps], "note": note})
        )
        return exps, policy, job.workload_id, note

    def revert_intervention(self, iid: int, actor: str) -> Intervention:
        """An operator's revert: any intervention, promoted ones included, back to its captured state."""
        try:
            iv = self.interventions.get(iid)
        except KeyError:
            raise NotFoundError(f"no intervention {iid}") from None
        if iv.state == "promoted":
            self.interventions.unpromote(iid)
        try:
            return self.interventions.revert(iid, f"reverted by {actor}", actor)
        except LeverError as e:
            raise InvalidArgumentError(f"intervention {iid} could not be reverted: {e}") from None

    def shutdown(self) -> None:
        with self._exp_lock:
            for cancel in self._exp_running.values():
                cancel.set()
        self._exp_pool.shutdown(wait=True, cancel_futures=True)
        self.interventions.revert_all("gitmd stopping")
        self.alive.clear()
        self.sampler.close_all()
        self._duty_pool.shutdown(wait=False, cancel_futures=True)
        self.granger.close()
        if self.capture is not None:
            self.capture.close_all_windows()


def _stored_view(job: Job) -> JobView:
    """An ended job's view: what its row keeps of its run (JobRegistry.exited)."""
    return JobView(job, [], job.windows, _stored_steps(job.steps), job.policy_id)


def _stored_steps(text: str) -> JobSteps | None:
    """A job's steps as JobRegistry.exited stored them (JSON), None when none or unreadable."""
    if not text:
        return None
    try:
        d = json.loads(text)
        return JobSteps(int(d["pid"]), int(d["window_id"]), StepStats(**d["stats"]), str(d["anchor_kernel"]))
    except (ValueError, KeyError, TypeError):
        return None
