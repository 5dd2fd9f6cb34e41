"""A job's end: its run by its own clock, whether it crashed under gitmd, its launch trial's run
recorded (and the trial decided), what gitmd held of it dropped; and the reaper for jobs whose
launcher never reported."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from gitmd.jobs.liveness import start_ticks
from gitmd.jobs.registry import Job
from gitmd.levers.launch_env import SiteReport
from gitmd.loop.attribute import Attribute
from gitmd.loop.cost import run_cost
from gitmd.loop.deps import Deps
from gitmd.loop.publish import Publisher
from gitmd.loop.state import Phase
from gitmd.loop.trials import Trials
from gitmd.loop.views import JobView, stored_view
from gitmd.phases import Phases
from gitmd.store.crashes import crash_signal, signal_name

log = logging.getLogger(__name__)
REAP_AFTER_S = 60.0  # every process of a job gone this long, and no exit reported: the job is lost
EXPIRE_UNSTARTED_S = 3600.0  # registered, never started a CUDA process
SCHEDULER_JOB_MAX_S = 30 * 86400.0  # a scheduler-closed job whose end never came (gitmd was down)
LOST_EXIT_CODE = -1000


class Exits:
    def __init__(self, d: Deps, pub: Publisher, trials: Trials, attribute: Attribute) -> None:
        self.d = d
        self.pub = pub
        self.trials = trials
        self.attribute = attribute

    def run_s(self, job_id: str) -> float | None:
        """The run's length by its own clock: from its first process's CUDA initialisation (its ring's
        creation) to its last process's exit (now, when one is still alive or its exit was not
        seen). None: no process of it initialised CUDA under the shim."""
        if self.d.capture is None:
            return None
        span = self.d.capture.lifetime_ns(job_id)
        return None if span is None else (span[1] - span[0]) / 1e9

    def crash(self, job_id: str, exit_code: int | None) -> str:
        """ "may be gitmd's: ..." when the run died by a signal (crashes.crash_signal) while gitmd had
        something in force on it; "" otherwise. Marks its workload: its next runs go plainly."""
        sig = crash_signal(exit_code)
        if not sig:
            return ""
        d = self.d
        job = d.jobs.get(job_id)
        st = d.states.get(job_id)
        in_force = []
        if job.capture:
            in_force.append("the shim and free guard loaded")
            n = self.pub.windows(job_id)
            if n:
                in_force.append(f"{n} capture window(s)")
            detached = sum(1 for s, _ in d.capture.processes(job_id) if s.detaches) if d.capture else 0
            if detached:
                in_force.append(f"CUPTI detached in {detached} process(es)")
        if st is not None and st.trial_id is not None:
            in_force.append(f"a run of launch trial {st.trial_id}")
        if st is not None and st.policy_id:
            in_force.append(f"policy {st.policy_id}")
        live = [
            iv.lever for iv in d.interventions.list(job_id) if iv.state in ("applying", "applied", "promoted")
        ]
        if live:
            in_force.append("live change(s) " + ", ".join(sorted(set(live))))
        if not in_force:
            return ""
        why = f"may be gitmd's: died of {signal_name(sig)} with " + "; ".join(in_force)
        d.crashes.mark(job.workload_id, job.launch_key, job_id, why)
        log.warning(
            "job %s (%s) %s; its program's next runs go without gitmd's capture until one ends cleanly",
            job_id, job.name, why,
        )  # fmt: skip
        return why

    def exited(
        self,
        job_id: str,
        exit_code: int,
        metrics: dict[str, list[float]] | None = None,
        wall_s: float | None = None,
        site: SiteReport | None = None,
        cuda_s: float | None = None,
        launcher_s: float | None = None,
    ) -> JobView:
        """The launcher (or the scheduler) reports the job's end; ``wall_s``: the command from exec
        to exit as the launcher timed it (None: not known); ``site``: what gitmd's sitecustomize
        did in its processes, as the launcher read it (None: not asked); ``cuda_s``: from its first
        process's CUDA initialisation to its exit, by the stamps of gitmd's clock library, for a run
        that had it in the shim's place (None: not known); ``launcher_s``: the launcher's own time
        around the command (its start to the exec, the exit to its report; None: not known)."""
        d = self.d
        ph = Phases()
        self.trials.end_live(job_id, "the job exited")
        ph.mark("live trial ended")
        run_s = self.run_s(job_id)
        ph.mark("run length read")
        st = d.states.get(job_id)
        # without the shim by gitmd's choice (a resting run, a launch trial's), not by a crash mark;
        # after a gitmd restart (no state of it held) its row says so: untraced in those phases
        shimless = bool(st and st.shimless) or self.untraced(job_id)
        crash = self.crash(job_id, exit_code)
        # a run without the shim is timed from its CUDA start by the clock library where its
        # launcher read the stamps, else by its launcher, exec to exit (Launch.register)
        if shimless:
            # stored as its run_s (the same milestones as a captured run's; its row's capture = 0
            # tells the two clocks apart: gitmd/jobs/history.py)
            run_s = cuda_s if cuda_s and (wall_s is None or cuda_s <= wall_s) else None
            length, clock = (run_s, "cuda_s") if run_s else (wall_s, "wall_s")
        else:
            length, clock = run_s, "run_s"
        trial_id = st.trial_id if st is not None else None  # run_ended lets go of it
        try:
            self.trials.run_ended(job_id, exit_code, metrics or {}, length, crash, clock, site)
        except Exception:
            log.exception("recording job %s's run of its launch trial failed", job_id)
        ph.mark("launch trial's run recorded")
        self.untrack(job_id)
        ph.mark("capture closed")
        out = self.outcome(job_id)
        cost = self.cost(job_id, run_s, out["windows"], wall_s, trial_id, launcher_s, ph.total_s)
        ph.mark("cost worked out")
        view = self.ended(
            d.jobs.exited(job_id, exit_code, run_s=run_s, crash=crash, cost=cost, wall_s=wall_s, **out)
        )
        ph.mark("stored")
        job = view.job
        if (
            exit_code == 0
            and not job.capture
            and not shimless
            and d.crashes.clear(job.workload_id, job.launch_key)
        ):
            log.info("job %s (%s) ran clean without gitmd's capture: capture resumes for its program",
                     job.id, job.name)  # fmt: skip
        self.pub.publish("exited", view)
        ph.mark("published")
        ph.log_if_slow(log, f"job {job_id}: its exit report")
        return view

    def untraced(self, job_id: str) -> bool:
        """The job's row says gitmd registered it for the shim and then let it go without
        (Launch.register: its phase written then), not that it ran without capture by a crash mark
        or its own choice (those have no phase)."""
        job = self.d.jobs.get(job_id)
        return (
            not job.capture
            and job.launcher != (0, 0)
            and job.phase in (Phase.OBSERVED.value, Phase.TRIAL_RUN.value)
        )

    def reap(self, now_ns: int | None = None) -> list[str]:
        """End jobs whose launcher never reported: every process gone for REAP_AFTER_S, or never
        started within EXPIRE_UNSTARTED_S. Their captures are closed and directories removed."""
        d = self.d
        now_ns = now_ns or time.time_ns()
        ended = []
        for job in d.jobs.list(include_exited=False):
            if job.scheduler_closes and now_ns - job.created_ns < SCHEDULER_JOB_MAX_S * 1e9:
                continue  # its scheduler reports the end (Slurm's Epilog)
            procs = d.capture.processes(job.id) if d.capture is not None else []
            if procs:
                st = d.states.of(job.id)
                if any(alive for _, alive in procs):
                    st.all_dead_since = None
                    continue
                if st.all_dead_since is None:
                    st.all_dead_since = now_ns
                if now_ns - st.all_dead_since < REAP_AFTER_S * 1e9:
                    continue
                why = "all its processes ended and no launcher reported"
            elif not job.capture and job.launcher != (0, 0):
                st = d.states.of(job.id)
                if start_ticks(job.launcher[0]) == job.launcher[1]:
                    st.all_dead_since = None
                    continue  # a job without the shim whose launcher waits for it: its report will come
                if st.all_dead_since is None:
                    st.all_dead_since = now_ns  # its report may be on its way: a grace, as for processes
                if now_ns - st.all_dead_since < REAP_AFTER_S * 1e9:
                    continue
                why = "it ran without the shim and its launcher ended without reporting"
            elif now_ns - job.created_ns < EXPIRE_UNSTARTED_S * 1e9:
                continue
            else:
                why = f"registered {EXPIRE_UNSTARTED_S:.0f} s ago and no process ever started"
            if d.jobs.get(job.id).state in ("exited", "lost"):
                continue  # its exit was reported meanwhile: not lost
            self.trials.end_live(job.id, "the job was lost")
            trial_id = d.states.of(job.id).trial_id  # run_ended lets go of it
            self.trials.run_ended(job.id, None, {}, None, "")
            if d.capture is not None:
                self.untrack(job.id)
            out = self.outcome(job.id)
            cost = self.cost(job.id, None, out["windows"], None, trial_id)
            lost = d.jobs.exited(job.id, LOST_EXIT_CODE, state="lost", cost=cost, **out)
            self.pub.publish("lost", self.ended(lost))
            log.info("job %s (%s) lost: %s", job.id, job.name, why)
            ended.append(job.id)
        return ended

    def untrack(self, job_id: str) -> None:
        """Its capture closed, and what only a running job needs dropped (its windows' analysis);
        its last reports kept in the store first (`gitmctl explain` on the ended job)."""
        d = self.d
        try:
            self.attribute.keep(job_id)
        except Exception:
            log.exception("keeping the reports of job %s failed", job_id)
        st = d.states.get(job_id)
        if d.capture is not None:
            jc = d.capture.get(job_id)
            if jc is not None and st is not None:
                st.windows_done = max(jc.windows, jc.opened)  # one its end cut short counts too
            d.capture.untrack(job_id)
        if st is not None:
            st.forget_observation()

    def outcome(self, job_id: str) -> dict[str, Any]:
        """What the ending job's run came to, for the store (JobRegistry.exited): from memory, or
        what was stored when it ended before (a second report of its exit)."""
        job = self.d.jobs.get(job_id)
        st = self.d.states.get(job_id)
        steps = st.steps if st is not None else None
        return {
            "windows": self.pub.windows(job_id) or job.windows,
            "policy_id": (st.policy_id if st is not None else 0) or job.policy_id,
            "steps": json.dumps(dataclasses.asdict(steps)) if steps is not None else job.steps,
        }

    def cost(
        self,
        job_id: str,
        run_s: float | None,
        windows: int,
        wall_s: float | None = None,
        trial_id: int | None = None,
        launcher_s: float | None = None,
        exit_s: float | None = None,
    ) -> str:
        """What gitmd cost the run (gitmd/loop/cost.py); never in the way of its end. ``trial_id``:
        the launch trial it was a run of (its state has let go of it by now); ``exit_s``: how long
        gitmd has taken over its exit report so far (None: not a report, the reaper's end)."""
        try:
            cost = run_cost(self.d, job_id, run_s, windows, wall_s, trial_id, launcher_s, exit_s)
        except Exception:
            log.exception("what gitmd cost job %s could not be worked out", job_id)
            return ""
        if cost:
            doc = json.loads(cost)
            if doc.get("total_share") is not None:
                log.info("job %s: gitmd cost its run %.1f%% (%s)", job_id, 100 * doc["total_share"], cost)
        return cost

    def ended(self, job: Job) -> JobView:
        """An ended job's view, from the store; what memory held of it is dropped (a daemon that runs
        for months keeps only its running jobs there)."""
        self.d.states.drop(job.id)
        return stored_view(job)
