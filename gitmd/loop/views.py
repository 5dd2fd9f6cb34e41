"""A job as the API shows it (JobView) and its events; built from the store and the loop's state."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gitmd.analysis.steps import JobSteps, StepStats
from gitmd.capture.ranks import Rank
from gitmd.capture.ring import RingStatus
from gitmd.jobs.registry import Job


@dataclass(frozen=True)
class JobView:
    job: Job
    processes: list[tuple[RingStatus, bool]]  # shim status of each process, alive or not
    windows: int
    steps: JobSteps | None = None  # from the latest window
    policy_id: int = 0  # the policy it was launched with
    ranks: dict[int, Rank] = field(default_factory=dict)  # pid -> its rank, for a distributed job's
    gpus: dict[int, tuple[int, ...]] = field(default_factory=dict)  # pid -> the GPUs NVML lists it on


@dataclass(frozen=True)
class JobEvent:
    kind: str  # registered, running, window, experiment, exited, lost
    at_ns: int
    view: JobView


def stored_view(job: Job) -> JobView:
    """An ended job's view: what its row keeps of its run (JobRegistry.exited)."""
    return JobView(job, [], job.windows, stored_steps(job.steps), job.policy_id)


def stored_steps(text: str) -> JobSteps | None:
    """A job's steps as JobRegistry.exited stored them (JSON), None when none or unreadable."""
    if not text:
        return None
    try:
        d = json.loads(text)
        return JobSteps(int(d["pid"]), int(d["window_id"]), StepStats(**d["stats"]), str(d["anchor_kernel"]))
    except (ValueError, KeyError, TypeError):
        return None
