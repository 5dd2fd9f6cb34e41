"""The transport-free facade: every API operation as a plain method, delegating to the job
registry, the loop (gitmd/loop/), the library and capture. No grpc and no loop logic in here.

The servicer converts messages and calls these; tests and other transports can call them directly.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitmd import __version__
from gitmd.analysis.report import WindowReport
from gitmd.analysis.worker import GrangerWorker
from gitmd.capture.windows import CaptureManager
from gitmd.config import Config
from gitmd.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from gitmd.events import Watch
from gitmd.experiments.interventions import Intervention, Interventions
from gitmd.experiments.live import Experiment, ExperimentStore
from gitmd.experiments.runs import LaunchTrials
from gitmd.experiments.tune import TunedLever
from gitmd.jobs.discovery import UntrackedProcess, untracked
from gitmd.jobs.launch import LaunchPlan
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.levers.base import LeverError
from gitmd.levers.host import CpuLoad
from gitmd.levers.launch_env import SiteReport
from gitmd.loop import Deps, Loop
from gitmd.loop.exits import EXPIRE_UNSTARTED_S, REAP_AFTER_S
from gitmd.loop.known import LIVE_POLICY_TICKS
from gitmd.loop.snapshot import StateSnapshot, snapshot
from gitmd.loop.trace import MAX_TRACE_S, TraceResult, trace
from gitmd.loop.tuned import record_tune
from gitmd.loop.views import JobEvent, JobView
from gitmd.store.audit import Audit
from gitmd.store.crashes import SuspectCrashes
from gitmd.store.library import Library, Policy, Workload
from gitmd.store.pause import PauseState
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import GpuInfo, GpuSample, TelemetryBackend
from gitmd.telemetry.sampler import Sampler

if TYPE_CHECKING:
    from gitmd.fleet.sync import FleetSync

# names the API and tests import from here
__all__ = [
    "EXPIRE_UNSTARTED_S", "LIVE_POLICY_TICKS", "MAX_TRACE_S", "REAP_AFTER_S", "JobEvent", "JobView",
    "Service", "Status", "TelemetryPage", "TraceResult",
]  # fmt: skip

DEFAULT_TELEMETRY_LIMIT = 10_000
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
    pause: PauseState
    config_toml: str = ""


@dataclass(frozen=True)
class TelemetryPage:
    samples: list[GpuSample]
    truncated: bool


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
        self.fleet: FleetSync | None = None  # [fleet] on: the daemon sets its sync here
        self.audit = Audit(jobs.store)
        self.interventions = Interventions(jobs.store, backend)
        self.experiments = ExperimentStore(jobs.store)
        self.trials = LaunchTrials(jobs.store)
        self.crashes = SuspectCrashes(jobs.store)
        self.granger = GrangerWorker()
        self.cpu_load = CpuLoad()  # sampled by the daemon every second: where a job's CPUs go
        self.started_at_ns = time.time_ns()
        self._started_mono = time.monotonic()
        self._gpus = backend.gpus()
        self.alive = threading.Event()
        self.alive.set()
        self.loop = Loop(
            Deps(
                config, backend, jobs, capture, library, self.interventions, self.experiments, self.trials,
                self.crashes, self._gpus, self.cpu_load, self.granger, self.alive,
                gpu_pids=sampler.process_gpus,
            )
        )  # fmt: skip
        self.states = self.loop.d.states

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
            pause=self.loop.d.pause.state,
            config_toml=self.config.toml(),
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

    def set_pause(self, paused: bool, by: str, reason: str = "") -> PauseState:
        """`gitmctl pause` / `resume` (loop.Loop.set_pause)."""
        if len(reason) > 1024 or "\n" in reason:
            raise InvalidArgumentError("a pause reason is one line of at most 1024 characters")
        self.loop.set_pause(paused, by, reason)
        return self.loop.d.pause.state

    # -- jobs --------------------------------------------------------------------------------
    def register_job(
        self, reg: Registration, audit_row: dict[str, Any] | None = None
    ) -> tuple[JobView, LaunchPlan]:
        job, plan = self.loop.launch.register(reg, audit_row)
        view = self.loop.pub.view(job, note_phase=False)
        self.loop.pub.publish("registered", view)
        return view, plan

    def watch_jobs(self, job_id: str) -> Watch[JobEvent]:
        if job_id:
            self.jobs.get(job_id)  # NOT_FOUND for an unknown job
        return self.loop.pub.watch(job_id)

    def get_job(self, id_or_name: str, uid: int | None = None) -> JobView:
        """``uid``: a name or id prefix means that user's job (JobRegistry.get)."""
        if not id_or_name:
            raise InvalidArgumentError("a job id or name is required")
        return self.loop.pub.view(self.jobs.get(id_or_name, uid))

    def list_jobs(
        self, include_exited: bool, scheduler_job_id: str = "", uid: int | None = None
    ) -> list[JobView]:
        """``uid``: that user's jobs only (filtered before any job is viewed)."""
        jobs = self.jobs.list(include_exited, scheduler_job_id)
        return [self.loop.pub.view(j) for j in jobs if uid is None or j.uid == uid]

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
                tracked |= {status.pid for status, _ in self.capture.processes(job_id, wait=False)}
        shimless = {j.id: j.uid for j in self.jobs.list(include_exited=False) if not j.capture}
        return untracked(self.sampler.latest(), tracked, os.getpid(), shimless)

    def report_exit(
        self,
        job_id: str,
        exit_code: int,
        metrics: dict[str, list[float]] | None = None,
        wall_s: float | None = None,
        site: SiteReport | None = None,
        cuda_s: float | None = None,
        launcher_s: float | None = None,
    ) -> JobView:
        return self.loop.exits.exited(job_id, exit_code, metrics, wall_s, site, cuda_s, launcher_s)

    def reap(self, now_ns: int | None = None) -> list[str]:
        return self.loop.exits.reap(now_ns)

    # -- capture and the loop's ticks -----------------------------------------------------------
    def trace_job(self, id_or_name: str, duration_s: float, raw: bool = False) -> TraceResult:
        if not 0 <= duration_s <= MAX_TRACE_S:
            raise InvalidArgumentError(f"duration must be 0..{MAX_TRACE_S:g} s")
        job = self.get_job(id_or_name).job
        return trace(self.loop.d, self.loop.observe, self.telemetry_store, job, duration_s, raw)

    def attribution(self, id_or_name: str, window_id: int = 0) -> WindowReport:
        """A window of the job analysed: the latest (taken now if there is none yet), or one of the
        latest reports by window id."""
        return self.loop.attribute.explain(self.get_job(id_or_name).job, window_id)

    def duty_cycle(self) -> None:
        """The duty tick: one window for every tracked job that is due one."""
        self.loop.tick()

    def renew_yields(self) -> None:
        self.loop.targets.renew_yields()

    # -- library -------------------------------------------------------------------------------
    def workloads(self) -> list[Workload]:
        return self.library.list()

    def fleet_policies(self, limit: int) -> list[dict[str, Any]]:
        """What the fleet store knows (gitmd/fleet/sync.py FleetSync.listing)."""
        if self.fleet is None:
            raise FailedPreconditionError(
                "the fleet is off on this node: [fleet] url is not set in gitmd.toml"
            )
        return self.fleet.listing(max(1, min(limit, 1000)))

    def workload(self, workload_id: str) -> Workload:
        return self.library.get(workload_id)

    def pin_policy(self, policy_id: int, who: str) -> Policy:
        return self.library.pin(policy_id, who)

    def set_workload_contract(self, workload_id: str, uid: int, contract: Any) -> None:
        """`gitmctl library contract`: ``uid``'s consent for their own runs of the workload."""
        self.library.set_contract(workload_id, uid, contract)

    def workload_contract(self, workload_id: str, uid: int) -> Any:
        return self.library.contract(workload_id, uid)[0]

    def numerics_hints(self, workload: Workload, contract: Any) -> list[dict[str, Any]]:
        return self.loop.attribute.numerics_hints(workload.id, contract)

    def unpin_policy(self, policy_id: int) -> Policy:
        return self.library.unpin(policy_id)

    def revert_policy(self, policy_id: int) -> Policy:
        return self.library.revert(policy_id)

    def export_library(self) -> bytes:
        return json.dumps(self.library.export(), indent=1).encode()

    def import_library(self, document: bytes) -> tuple[int, int]:
        return self.library.import_(document)

    # -- trials run by gitmctl tune, and operators' reverts --------------------------------------
    def record_tune(
        self,
        job_id: str,
        metric: str,
        levers: list[TunedLever],
        min_gain: float,
        scope_uid: int | None,
        actor: str,
    ) -> tuple[list[Experiment], Policy | None, str, str]:
        """`gitmctl tune`'s trials decided here (loop/tuned.py)."""
        return record_tune(self.loop.d, self.audit, job_id, metric, levers, min_gain, scope_uid, actor)

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
        self.loop.trials.shutdown()  # its live trials cancelled and finished first
        self.interventions.revert_all("gitmd stopping")
        self.alive.clear()
        self.sampler.close_all()
        self.loop.shutdown()
        self.granger.close()
        if self.capture is not None:
            self.capture.close_all_windows()

    # -- the Prometheus exporter's view of gitmd (gitmd/metrics.py) ------------------------------
    def metrics_snapshot(self) -> StateSnapshot:
        return snapshot(self.loop.d)
