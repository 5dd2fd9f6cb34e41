"""What every stage of the loop works with: the daemon's parts, handed down once (Deps)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gitmd.analysis.worker import GrangerWorker
from gitmd.capture.context import host_cpu_ns, own_cpu_s
from gitmd.capture.windows import CaptureManager
from gitmd.config import Config
from gitmd.events import Hub
from gitmd.experiments.interventions import Interventions
from gitmd.experiments.live import ExperimentStore
from gitmd.experiments.runs import LaunchTrials
from gitmd.jobs.registry import JobRegistry
from gitmd.levers.host import CpuLoad
from gitmd.loop.state import States
from gitmd.loop.views import JobEvent
from gitmd.store.crashes import SuspectCrashes
from gitmd.store.library import Library
from gitmd.store.pause import Pause
from gitmd.store.reports import JobReports
from gitmd.telemetry.backend import GpuInfo, TelemetryBackend


@dataclass
class Deps:
    config: Config
    backend: TelemetryBackend
    jobs: JobRegistry
    capture: CaptureManager | None
    library: Library
    interventions: Interventions
    experiments: ExperimentStore
    launch_trials: LaunchTrials
    crashes: SuspectCrashes
    gpus: list[GpuInfo]
    cpu_load: CpuLoad
    granger: GrangerWorker
    alive: threading.Event
    job_events: Hub[JobEvent] = field(default_factory=Hub)
    states: States = field(default_factory=States)
    reports: JobReports = field(init=False)  # ended jobs' last attribution reports
    pause: Pause = field(init=False)  # `gitmctl pause`: no window, no trial; policies still apply
    # [fleet] on: a registration whose launch key the library does not know asks the fleet sync for a
    # round now, without waiting for it (the next launch gets what the fleet knows)
    fleet_miss: Callable[[], None] | None = None
    # pid -> the GPUs (index) whose latest telemetry sample lists it (Sampler.process_gpus): what job
    # views show
    gpu_pids: Callable[[], dict[int, tuple[int, ...]]] = dict
    # gitmd's own CPU seconds (its threads and worker processes) and the host's (busy, total) CPU ns,
    # read when a job registers and when it ends: what its cost record says gitmd and the host did
    # with the CPUs while it ran (cost.py)
    own_cpu: Callable[[], float] = own_cpu_s
    host_cpu: Callable[[], tuple[int, int] | None] = host_cpu_ns

    def __post_init__(self) -> None:
        self.reports = JobReports(self.jobs.store)
        self.pause = Pause(self.jobs.store)

    def gpu_model(self) -> str:
        return self.gpus[0].name if self.gpus else ""
