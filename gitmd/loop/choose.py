"""Choose: from a window's causes (two windows in a row), which trial to start — a live trial of a
lever on the running job, or a launch trial of an environment lever over the workload's next runs."""

from __future__ import annotations

import logging
import time

from gitmd.analysis.causes import Cause
from gitmd.analysis.report import WindowReport, idle_share
from gitmd.errors import GitmdError
from gitmd.jobs.frameworks import maps_library
from gitmd.jobs.registry import Job
from gitmd.levers.base import Risk
from gitmd.levers.launch_env import EnvLever
from gitmd.levers.registry import make as make_lever
from gitmd.loop.attribute import Attribute
from gitmd.loop.cost import exploration_left
from gitmd.loop.deps import Deps
from gitmd.loop.publish import Publisher
from gitmd.loop.targets import Targets
from gitmd.loop.trials import Trials

log = logging.getLogger(__name__)


# a live trial needs one pair of windows before the run ends, by this many of its program's
# latest runs (Choose.no_time_for_a_pair)
PAIR_RUNS = 2
MAX_SHARE = 0.99  # a cause said to take the whole run predicts at most 100x (never 0: it goes first)


def reach(report: WindowReport, lever: str) -> float:
    """The most of the job's time a lever can give back: the ceilings of every cause above
    threshold that it addresses, together — for a lever that changes only the host's threads, no
    more than the window's GPU-idle share (host contention is taken out of the same idle time as
    sync stalls and launch gaps: causes.rank). What bounds a plausible gain (live.beyond_cause,
    runs.LaunchTrial.bound). One cause's ceiling alone was too tight: a CPU placement on a contended
    launch-bound job removes its run-queue waits and the launch gaps they stretched (H200 2026-12-04:
    host_contention 66% bounded it at 2.96x; 0.146 and 0.230 ms steps against 0.044 with it, a 4.2x
    the job's own windows showed, 95% 3.35-5.31). A cause's ``bounds`` (what the window shows a lever
    can reach) set its predicted gain, not this: they can miss what a window cannot show."""
    got = sum(c.ceiling for c in report.causes if c.above_threshold and lever in c.levers)
    if make_lever(lever).host_only:
        main = next((p for p in report.processes if p.pid == report.cause_pid), None)
        if main is not None:
            got = min(got, idle_share(main.breakdown))
    return min(got, MAX_SHARE)


def likelihood(record: tuple[int, int] | None) -> float:
    """How likely a lever's trial is to be kept, from its record on this host (promoted, decided):
    Laplace's rule, 0.5 for a lever never decided here."""
    kept, decided = record or (0, 0)
    return (kept + 1) / (decided + 2)


class Choose:
    def __init__(
        self, d: Deps, pub: Publisher, attribute: Attribute, targets: Targets, trials: Trials
    ) -> None:
        self.d = d
        self.pub = pub
        self.attribute = attribute
        self.targets = targets
        self.trials = trials

    def _report(self, job: Job) -> WindowReport | None:
        try:
            return self.attribute.report(job)
        except GitmdError:
            return None

    def live(self, job_id: str) -> str:
        """After a duty window: if its top cause selects a live lever not tried on this job yet, and
        the job allows exploration, run one live trial (one per job at a time). Returns why no
        trial started ("" when one did, or one runs): explain shows it, the debug log too."""
        d = self.d
        cfg = d.config.experiments
        if not cfg.enabled or d.capture is None or not d.alive.is_set() or d.pause.on:
            return "experiments off or paused"
        st = d.states.of(job_id)
        with d.states.exp_lock:
            if st.experiment is not None:
                return ""
        if st.trial_id is not None:
            return f"a run of launch trial {st.trial_id}: nothing else may change under it"
        if st.observed:
            return "its observation has ended"
        job = d.jobs.get(job_id)
        if job.state not in ("registered", "running"):
            return f"it is {job.state}"
        why = self.not_explorable(job)
        if why:
            return why
        spent = st.spent or exploration_left(d, job_id) or self.no_time_for_a_pair(job)
        if spent:
            return spent
        report = self._report(job)
        if report is None:
            return "its window could not be analysed"
        earlier = self.attribute.earlier_causes(job, report)
        # the causes some lever addresses, largest first (exposed communication and unexplained
        # kernel slowdowns have none: a DDP job whose collectives take most of its step is still
        # helped with what comes after them); a cause whose levers are all out of reach here (launch
        # levers only, tried already) gives way to the next
        causes = [c for c in report.causes if c.above_threshold and c.name in earlier and c.levers]
        if not causes:
            return self.no_cause(report, earlier)
        # One try per (job, lever), also across gitmd restarts: the experiments table remembers.
        st.tried |= {e.lever for e in d.experiments.of_job(job_id)}
        # decided on an earlier run of its workload and not kept: not tried again (each try costs a run)
        reverted = {n for n, s in d.experiments.workload_levers(job.workload_id).items() if s == "reverted"}
        record = d.experiments.lever_record()
        said = []
        for top in causes:
            none_because = self._live_on(job, top, report, reverted, record)
            if none_because is None:
                return ""
            said.append(f"{top.name}: {none_because}")
        return "; ".join(said)

    def _live_on(
        self,
        job: Job,
        top: Cause,
        report: WindowReport,
        reverted: set[str],
        record: dict[str, tuple[int, int]],
    ) -> str | None:
        """A live trial of one of ``top``'s levers, the likeliest to be kept here first (their record
        on this host): None once one started (or the job's experiment slot was taken meanwhile), else
        why none of them could."""
        d, cfg, job_id = self.d, self.d.config.experiments, job.id
        st = d.states.of(job_id)
        skipped = []
        # the cause's levers, the likeliest to be kept here first (their record on this host)
        for name in sorted(top.levers, key=lambda n: -likelihood(record.get(n))):
            if name not in cfg.live_levers:
                skipped.append(f"{name} not in experiments.live_levers")
                continue
            if name in st.tried:
                skipped.append(f"{name} tried on this run")
                continue
            if name in reverted:
                skipped.append(f"{name} tried on an earlier run of its workload and not kept")
                continue
            if d.experiments.stalled(job.workload_id, name):
                # its program's runs end before a pair of its windows fits: each try only disturbs
                # a run (timm's 24-s image-folder training started a CPU trial on four runs in a
                # row, each ended by the exit with no pair; H200 2026-12-04)
                skipped.append(f"{name}: its last two tries on this program's runs ended before a pair")
                continue
            lever = self.targets.live_lever(name, job)
            if lever is None:
                skipped.append(f"{name} has nothing to act on")
                continue
            with d.states.exp_lock:
                if st.experiment is not None:
                    return None
                log.info("job %s: %s costs %.0f%% of its time; trying %s",
                         job_id, top.name, 100 * top.share, lever.describe())  # fmt: skip
                self.trials.start_live(job_id, lever, top.name, reach(report, name))
            return None
        return "; ".join(skipped) or "no live lever addresses it"

    def no_time_for_a_pair(self, job: Job) -> str:
        """Why the run has no time left for one pair of a live trial's windows ("" : it may have):
        its program's latest runs (PAIR_RUNS of them, registration to exit) all ended sooner than
        one pair (a window, the settle after applying, a window, the settle after reverting) from
        now. Such a trial ends at the job's exit with nothing measured, disturbs the run for
        nothing, and made the next runs of the program be observed to continue it (timm's 15-s
        training, H200 2026-12-04: a CPU trial started 5 s before each run's end). A program with
        fewer known runs may try."""
        d = self.d
        runs = d.jobs.program_runs_s(job, runs=PAIR_RUNS)
        if len(runs) < PAIR_RUNS:
            return ""
        pair_s = 2 * (d.config.capture.window_duration_s + d.config.experiments.settle_s)
        left = max(runs) - (time.time_ns() - job.created_ns) / 1e9
        if left >= pair_s:
            return ""
        return (
            f"its program's latest {len(runs)} runs ended within {max(runs):.0f} s of their launch: "
            f"{max(left, 0.0):.1f} s left, less than one pair of trial windows ({pair_s:.1f} s)"
        )

    def not_explorable(self, job: Job) -> str:
        """What live experiments and launch-trial planning both ask of a job: its registration
        allows exploration, it did not get its workload's policy (known), and it is past start-up
        (settled) — start-up is not its steady state: weights copied from pageable memory for
        seconds look like a cause, and transformer's first window looked launch-bound (H200,
        2026-12-03: a CPU experiment ran on its start-up). Why not ("" : it may be explored)."""
        if not job.allow_exploration:
            return "its registration does not allow exploration"
        if self.pub.known(job.id):
            return "it runs its workload's validated policy (experiments.explore_known is off)"
        if not self.pub.settled(job.id):
            return "still starting up (no window has found its step yet)"
        return ""

    @staticmethod
    def no_cause(report: WindowReport, earlier: set[str]) -> str:
        now = [c for c in report.causes if c.above_threshold]
        if not now:
            return "no cause above threshold in its latest window"
        bare = [c.name for c in now if c.name in earlier and not c.levers]
        pending = [c.name for c in now if c.name not in earlier]
        said = []
        if bare:
            said.append(
                f"{', '.join(bare)} above threshold in two windows in a row, and no lever addresses it"
            )
        if pending:
            said.append(
                f"{', '.join(pending)} above threshold in its latest window, not in the one before "
                f"({', '.join(sorted(earlier)) or 'none'}): a cause must show in two windows in a row"
            )
        return "; ".join(said) or "no cause a lever addresses in two windows in a row"

    def launch(self, job_id: str) -> str:
        """After a duty window: a cause above threshold that a launch lever addresses plans a
        launch trial for the job's workload (one at a time, one per lever). Returns why none was
        planned ("" when one was, or one runs)."""
        d = self.d
        cfg = d.config.experiments
        job = d.jobs.get(job_id)
        if job.state not in ("registered", "running") or d.pause.on:
            return f"it is {job.state}" if not d.pause.on else "paused"  # ended: explain only
        if not cfg.enabled:
            return "experiments off"
        if not job.workload_id:
            return "no workload yet (its step has not been fingerprinted)"
        # a run of the workload meets its running trial: one its runs pass by for good ends here,
        # whether or not this run may explore (Trials.stalled)
        running = d.launch_trials.running(job.workload_id)
        if running is not None and self.trials.stalled(running):
            running = None
        why = self.not_explorable(job)
        if why:
            return why
        if running is not None:
            return ""
        report = self._report(job)
        if report is None:
            return "its window could not be analysed"
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
        skipped: list[str] = []
        seen = False
        record = d.launch_trials.lever_record()
        mapped = d.jobs.workload_frameworks(job.workload_id)  # the Python frameworks its process maps
        best: tuple[float, float, Cause, EnvLever] | None = None
        for cause in report.causes:
            if not cause.above_threshold or cause.name not in earlier or not cause.levers:
                continue
            seen = True
            if cause.name in live_on:
                skipped.append(f"{cause.name}: a live trial on it runs")
                continue
            for name in cause.levers:
                if name not in cfg.launch_levers or name in tried:
                    continue
                lever = make_lever(name)
                if not isinstance(lever, EnvLever):
                    continue
                if lever.acts_through and maps_library(mapped, lever.acts_through) is False:
                    # its variables are read by a library the program does not load: the trial's
                    # runs cannot differ (H100 2026-12-07: DataLoader workers planned on a CuPy
                    # program, cupy-cg, and on timm's benchmark, which loads torch and no DataLoader:
                    # that one only its site report can tell, after its B runs). Not known: planned
                    skipped.append(
                        f"{name}: acts through {lever.acts_through}, which its process does not load"
                    )
                    continue
                if lever.live_form in cfg.live_levers and lever.live_form in st.tried:
                    skipped.append(f"{name}: its live form was tried on this run")
                    continue  # tried within the run: its outcome stands for the launch form too
                if lever.risk is Risk.NUMERICS and not reported:
                    skipped.append(f"{name}: changes numerics and the contract compares none")
                    continue  # its numbers could not be compared across runs (payloads come per window)
                # the gain attribution predicts: the cause's share, or less where the window bounds
                # what the lever can reach (more hardware queues on a launch-bound job: the cause's
                # 97% predicted 33x for a lever that could overlap kernels of 0-0.6% of the window)
                predicted = 1 / (1 - min(cause.share, cause.bound(name), MAX_SHARE))
                # what it is expected to give: the gain attribution predicts, as likely as this
                # lever's launch trials on this host were kept (each trial costs the same runs)
                expected = 1 + max(0.0, predicted - 1) * likelihood(record.get(name))
                if best is None or expected > best[0]:
                    best = (expected, predicted, cause, lever)
        if best is not None:
            expected, predicted, cause, lever = best
            t = d.launch_trials.plan(job.workload_id, lever, cause.name, reach(report, lever.name), predicted)
            if t is None:
                return f"{lever.name}: not planned"
            log.info(
                "workload %s: %s costs %.0f%% of run %s (at most %.0f%%); its next launches try %s "
                "(launch trial %d; predicted %.2fx, expected %.2fx by its record here)",
                job.workload_id, cause.name, 100 * cause.share, job_id, 100 * cause.ceiling,
                lever.describe(), t.id, predicted, expected,
            )  # fmt: skip
            return ""
        if not seen:
            return self.no_cause(report, earlier)
        return "; ".join(skipped) or "every launch lever for its causes was tried on this workload"
