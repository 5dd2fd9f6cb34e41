"""Choose: from a window's causes (two windows in a row), which trial to start — a live trial of a
lever on the running job, or a launch trial of an environment lever over the workload's next runs."""

from __future__ import annotations

import logging

from gitmd.analysis.report import WindowReport
from gitmd.errors import GitmdError
from gitmd.jobs.registry import Job
from gitmd.levers.base import Risk
from gitmd.levers.launch_env import EnvLever
from gitmd.levers.registry import make as make_lever
from gitmd.loop.attribute import Attribute
from gitmd.loop.deps import Deps
from gitmd.loop.publish import Publisher
from gitmd.loop.targets import Targets
from gitmd.loop.trials import Trials

log = logging.getLogger(__name__)


class Choose:
    def __init__(
        self, d: Deps, pub: Publisher, attribute: Attribute, targets: Targets, trials: Trials
    ) -> None:
        self.d = d
        self.pub = pub
        self.attribute = attribute
        self.targets = targets
        self.trials = trials

    def explorable(self, job: Job) -> bool:
        """What live experiments and launch-trial planning both ask of a job: its registration
        allows exploration, it did not get its workload's policy (known), and it is past start-up
        (settled) — start-up is not its steady state: weights copied from pageable memory for
        seconds look like a cause, and transformer's first window looked launch-bound (H200,
        2026-12-03: a CPU experiment ran on its start-up)."""
        return job.allow_exploration and not self.pub.known(job.id) and self.pub.settled(job.id)

    def _report(self, job: Job) -> WindowReport | None:
        try:
            return self.attribute.report(job)
        except GitmdError:
            return None

    def live(self, job_id: str) -> None:
        """After a duty window: if its top cause selects a live lever not tried on this job yet, and
        the job allows exploration, run one live trial (one per job at a time)."""
        d = self.d
        cfg = d.config.experiments
        if not cfg.enabled or d.capture is None or not d.alive.is_set() or d.pause.on:
            return
        st = d.states.of(job_id)
        with d.states.exp_lock:
            if st.experiment is not None:
                return
        if st.trial_id is not None:
            return  # a run of a launch trial: nothing else may change under it
        if st.observed:
            return  # its observation has ended: a live trial would get no window to measure
        job = d.jobs.get(job_id)
        if job.state not in ("registered", "running") or not self.explorable(job):
            return
        report = self._report(job)
        if report is None:
            return
        earlier = self.attribute.earlier_causes(job, report)
        top = next((c for c in report.causes if c.above_threshold and c.name in earlier), None)
        if top is None:
            return
        # One try per (job, lever), also across gitmd restarts: the experiments table remembers.
        st.tried |= {e.lever for e in d.experiments.of_job(job_id)}
        for name in top.levers:
            if name not in cfg.live_levers or name in st.tried:
                continue
            lever = self.targets.live_lever(name, job)
            if lever is None:
                continue
            with d.states.exp_lock:
                if st.experiment is not None:
                    return
                log.info("job %s: %s costs %.0f%% of its time; trying %s",
                         job_id, top.name, 100 * top.share, lever.describe())  # fmt: skip
                self.trials.start_live(job_id, lever, top.name, top.ceiling)
            return

    def launch(self, job_id: str) -> None:
        """After a duty window: a cause above threshold that a launch lever addresses plans a
        launch trial for the job's workload (one at a time, one per lever)."""
        d = self.d
        cfg = d.config.experiments
        job = d.jobs.get(job_id)
        if job.state not in ("registered", "running") or d.pause.on:
            return  # ended: its kept report is for explain, not for planning (review 2026-12-03)
        if not cfg.enabled or not job.workload_id or not self.explorable(job):
            return
        if d.launch_trials.running(job.workload_id) is not None:
            return
        report = self._report(job)
        if report is None:
            return
        tried = {t.lever for t in d.launch_trials.of_workload(job.workload_id)}
        st = d.states.of(job_id)
        with d.states.exp_lock:
            # a live lever is being tried that may remove these causes (contended, H200 2026-12-03:
            # a launch trial planned on launch_bound while cpu_affinity, which addresses it too, was
            # being tried ran on the next launches, the recurring one among them)
            live_on = set(st.experiment_causes)
        reported = any(c.kind == "stdout_metric" for c in job.contract.checks)
        # A trial costs the workload's next runs: plan only for a cause seen in two windows in a row
        earlier = self.attribute.earlier_causes(job, report)
        for cause in report.causes:
            if not cause.above_threshold or cause.name not in earlier or cause.name in live_on:
                continue
            for name in cause.levers:
                if name not in cfg.launch_levers or name in tried:
                    continue
                lever = make_lever(name)
                if not isinstance(lever, EnvLever):
                    continue
                if lever.live_form in cfg.live_levers and lever.live_form in st.tried:
                    continue  # tried within the run: its outcome stands for the launch form too
                if lever.risk is Risk.NUMERICS and not reported:
                    continue  # its numbers could not be compared across runs (payloads come per window)
                predicted = 1 / (1 - cause.share) if cause.share < 1 else 0.0
                t = d.launch_trials.plan(job.workload_id, lever, cause.name, cause.ceiling, predicted)
                if t is not None:
                    log.info(
                        "workload %s: %s costs %.0f%% of run %s (at most %.0f%%); its next launches try %s "
                        "(launch trial %d)", job.workload_id, cause.name, 100 * cause.share, job_id,
                        100 * cause.ceiling, lever.describe(), t.id,
                    )  # fmt: skip
                return
