"""Trials: a change tried as a controlled experiment, validated, then kept or rolled back. Two
forms of one concept, both evidence about the *workload*:
- a live trial (LiveExperiment) changes a running job, A and B alternating over its windows,
  and reverts unless it is measurably faster with the outputs unchanged (experiments/live.py);
- a launch trial changes the environment of the workload's next runs, arm A or B by run, each run
  measured by its own clock, decided when its runs have exited (experiments/runs.py).
A promoted trial becomes a policy of the workload in the library; its next launch gets it. A live
trial its job ended before deciding is continued by the next run's trial of the same lever: the
pairs it measured stay evidence about the workload (ExperimentStore.resumable)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gitmd.analysis.steps import step_timing
from gitmd.capture.payloads import scalars as payload_scalars
from gitmd.errors import GitmdError
from gitmd.experiments.decide import Decision
from gitmd.experiments.live import LiveExperiment, Measurement, decision_json
from gitmd.experiments.run_decision import decide_trial
from gitmd.experiments.runs import MAX_FRESH, MAX_SKIPPED, MAX_SPOILED, METRICS, LaunchTrial, line
from gitmd.jobs.launch import LaunchPlan
from gitmd.jobs.launch_key import command_digest
from gitmd.jobs.registry import Job
from gitmd.levers.base import Lever
from gitmd.levers.launch_env import SiteReport, untouched
from gitmd.levers.registry import PolicyEnv
from gitmd.loop.cost import exploration_left
from gitmd.loop.deps import Deps
from gitmd.loop.observe import Observe
from gitmd.loop.publish import Publisher
from gitmd.loop.targets import Targets
from gitmd.store.library import LIVE_POLICY_LEVERS, Policy

log = logging.getLogger(__name__)


NOT_APPLICABLE_RUNS = 2  # B runs that must agree the lever changed nothing before it is given up


def not_applicable(t: LaunchTrial) -> str:
    """Why the trial's lever cannot act in this program ("" : it may): NOT_APPLICABLE_RUNS B runs of
    one command line ran to a clean end (exit 0, a length), each with PyTorch adjusted by gitmd's
    sitecustomize and the lever's knobs changing nothing (launch_env.untouched), and every other B
    run that ended cleanly agrees. Asked only once no B run is still running (one might yet say its
    knob acted). A B run killed, failed or crashed before the program reached the knob (a DataLoader
    built late, a cache emptied at the end) says nothing; one with no report, or whose knob acted,
    keeps the lever: giving it up is for good on the workload. Each line counts on its own: an
    evaluation-only line of the program may build no DataLoader where its training line would."""
    b_runs = [r for r in t.runs if r["arm"] == "B"]
    if not b_runs or any(not r.get("done") for r in b_runs):
        return ""
    values = t.lever_obj().values()
    clean = [r for r in b_runs if not r.get("crashed") and r.get("exit_code") == 0 and r.get("run_s")]
    whys: dict[str, tuple[list[str], str]] = {}
    for r in clean:
        why = untouched(values, _site(r.get("site")))
        if not why:
            return ""
        jobs, _ = whys.setdefault(line(r), ([], why))
        jobs.append(r["job_id"])
    for jobs, why in whys.values():
        if len(jobs) >= NOT_APPLICABLE_RUNS:
            return f"in its B runs {', '.join(jobs)}, {why}"
    return ""


def _site(raw: object) -> SiteReport | None:
    """A run's stored site report (None: none, or not one this gitmd reads)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("acted"), list):
        return None
    try:
        return SiteReport(bool(raw.get("loaded")), tuple(str(x) for x in raw["acted"]))
    except ValueError:
        return None


class Trials:
    def __init__(self, d: Deps, observe: Observe, targets: Targets, pub: Publisher) -> None:
        self.d = d
        self.observe = observe
        self.targets = targets
        self.pub = pub
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="experiment")

    # -- live trials -------------------------------------------------------------------------------
    @staticmethod
    def unconfirmed(policy: Policy) -> bool:
        """A policy the fleet brought that this node has not tried on its own runs yet."""
        return policy.status == "validated" and policy.trust == 1

    def confirmed(
        self, policy_id: int, dec: Decision, trial: dict[str, Any], suspect: bool | None = None
    ) -> None:
        """This node's trial of a policy from the fleet has decided: it held here (measurably
        faster, outputs unchanged: kept, this node's own evidence now), or not (reverted here; the
        fleet is told, and marks it suspect when it made the job slower or changed its outputs)."""
        iv = dec.interval
        slower = iv is not None and iv.high < 1.0
        changed = iv is None and dec.reason.startswith("outputs changed")
        result = {
            "held": dec.promote,
            "suspect": not dec.promote and ((slower or changed) if suspect is None else suspect),
            "speedup": round(iv.speedup, 4) if iv else None,
            "ci": [round(iv.low, 4), round(iv.high, 4)] if iv else None,
            "pairs": iv.pairs if iv else 0,
            "reason": dec.reason,
            "at_ns": time.time_ns(),
            **trial,
        }
        p = self.d.library.confirm(policy_id, result)
        said = "held" if dec.promote else "is suspect" if result["suspect"] else "did not hold"
        log.info("policy %d from the fleet %s on this node (%s): %s", policy_id, said, p.status, dec.reason)

    def start_live(
        self, job_id: str, lever: Lever, cause: str, ceiling: float | None, confirm: int = 0
    ) -> None:
        """A live trial of ``lever`` on the running job, in its own thread; the job's state says
        it is exploring until it has decided (called under states.exp_lock). No launch trial is
        planned meanwhile on the causes it may remove: the one it acts on and its lever's others."""
        st = self.d.states.of(job_id)
        cancel = threading.Event()
        st.experiment = cancel
        st.experiment_causes = {cause, *lever.causes}
        st.tried.add(lever.name)
        self.pool.submit(self.run_live, job_id, lever, cause, cancel, ceiling, confirm)
        self.pub.note_phase(job_id)

    def run_live(
        self,
        job_id: str,
        lever: Lever,
        cause: str,
        cancel: threading.Event,
        cause_share: float | None = None,
        confirm: int = 0,
    ) -> None:
        """``confirm``: the trial is this node's confirmation of that policy from the fleet (its
        result goes to ``confirmed``, not into a new policy)."""
        d = self.d
        cfg = d.config.experiments
        assert d.capture is not None
        capture = d.capture

        def measure() -> Measurement | None:
            if cancel.is_set():
                return None
            try:
                w = capture.capture(job_id, d.config.capture.window_duration_s)
            except KeyError:
                return None  # the job ended
            steps = self.observe.after_window(w)
            values: tuple[float, ...] = ()
            if steps is not None:
                main = next(p for p in w.processes if p.pid == steps.pid)
                values = tuple(float(x) for x in payload_scalars(main.records))
            step_ms, busy = step_timing(w, steps)
            return Measurement(w.window_id, step_ms, values, busy)

        try:
            # the workload's unfinished trials of this lever: their pairs count, this run adds its own
            earlier = d.experiments.resumable(d.jobs.get(job_id).workload_id, lever.name)
            exp = LiveExperiment(
                d.experiments,
                d.interventions,
                job_id,
                lever,
                cause,
                target=lambda: self.targets.target(job_id),
                measure=measure,
                rounds=cfg.rounds,
                settle_s=cfg.settle_s,
                min_gain=cfg.min_gain,
                cancel=cancel,
                early_speedup=cfg.early_speedup,
                cause_share=cause_share,
                earlier=earlier,
                budget=lambda a, b: self._budget(job_id, a, b),
                ranks=lambda: d.capture.ranks(job_id) if d.capture is not None else {},
            )
            dec = exp.run()
            if confirm and exp.exp.state not in ("abandoned", "failed"):
                self.confirmed(confirm, dec, {"experiment": exp.exp.id, "job_id": job_id})
                if dec.promote:
                    self.d.states.of(job_id).policy_id = confirm
            elif dec.promote and dec.interval is not None:
                self.keep_live(job_id, lever, exp.exp.id, dec)
        except Exception:
            log.exception("experiment on job %s failed; its interventions were reverted", job_id)
        finally:
            st = d.states.of(job_id)
            with d.states.exp_lock:
                st.experiment = None
                st.experiment_causes = set()
            self.pub.publish("experiment", self.pub.view(d.jobs.get(job_id)))  # its phase noted too
            try:
                with st.step:
                    self.observe.end_if_done(job_id)
            except Exception:
                log.exception("ending the observation of job %s failed", job_id)

    def _budget(self, job_id: str, a_ms: list[float], b_ms: list[float]) -> str:
        """The running live trial's budget check (cost.exploration_left); once it stops a trial, no
        other starts on this run (choose.live reads ``spent``)."""
        why = exploration_left(self.d, job_id, a_ms, b_ms)
        if why:
            self.d.states.of(job_id).spent = why
        return why

    def keep_live(self, job_id: str, lever: Lever, experiment_id: int, dec: Decision) -> None:
        """A promoted live lever becomes a policy of the job's workload (its intent, not its
        target): the next run gets it as soon as its processes are seen."""
        d = self.d
        job = d.jobs.get(job_id)
        if not job.workload_id or lever.name not in LIVE_POLICY_LEVERS or dec.interval is None:
            return
        intent = {k: v for k, v in lever.setting.items() if k in LIVE_POLICY_LEVERS[lever.name]}
        p = d.library.add_policy(
            job.workload_id,
            {},
            "validated",
            dec.interval.speedup,
            (dec.interval.low, dec.interval.high),
            {
                "source": "live",
                "experiment": experiment_id,
                "job_id": job_id,
                "lever": lever.describe(),
                "pairs": dec.interval.pairs,
                "reason": dec.reason,
                "scope_uid": None,  # gitmd measured it from its own windows
                "scheduler_job_id": job.scheduler_job_id,
                "frameworks": d.jobs.workload_frameworks(job.workload_id),  # what it was learned with
            },
            gpu_model=d.gpu_model(),
            driver=d.backend.driver_version() or "",
            live=[{"lever": lever.name, "setting": intent}],
        )
        log.info(
            "workload %s: %s stored as policy %d for its next runs", job.workload_id, lever.describe(), p.id
        )

    def end_live(self, job_id: str, why: str) -> None:
        """The job's live trial stops (its changes reverted): the job ended, or gitmd stops."""
        st = self.d.states.get(job_id)
        with self.d.states.exp_lock:
            cancel = st.experiment if st is not None else None
        if cancel is not None:
            cancel.set()
        self.d.interventions.revert_all(why, job_id)

    # -- launch trials -----------------------------------------------------------------------------
    def arm(self, job: Job, workload_id: str, plan: LaunchPlan) -> LaunchPlan:
        """A launch trial of the workload runs: this launch is its next run, arm A or B."""
        d = self.d
        running = None if d.pause.on else d.launch_trials.running(workload_id)
        if running is None:
            return plan  # the common case, read only: no write transaction per registration
        if running.lever == PolicyEnv.name and not self._still_confirming(running, plan):
            return plan  # ended before this run took an arm in it
        # a pair is two runs of one command line: only a line launched here before may open one
        opens = d.jobs.launched_before(job)
        got = d.launch_trials.assign(
            workload_id, job.id, job.uid, command_digest(job.command, job.cwd), opens
        )
        if got is None:
            return plan
        t, arm = got
        if not arm:
            half = t.half()
            if half is None:
                if not self.stalled(t):
                    log.info("job %s (%s): no arm in launch trial %d (%s): its command line was not launched "
                             "here before, so no second run of it may come to pair with it", job.id, job.name,
                             t.id, t.lever)  # fmt: skip
            else:
                waits = "still runs" if not half.get("done") else (
                    f"has ended ({t.skipped} of {MAX_SKIPPED} launches of other lines before it is left "
                    "unpaired)"
                )  # fmt: skip
                log.info("job %s (%s): no arm in launch trial %d (%s): its pair's first run, job %s, is of "
                         "another command line (a pair compares two runs of the same work) and %s", job.id,
                         job.name, t.id, t.lever, half.get("job_id", "?"), waits)  # fmt: skip
            return plan
        d.states.of(job.id).trial_id = t.id
        # the lever's variables are never gitmd's own (a policy may not set those)
        lever = t.lever_obj()
        env = {**plan.env, **lever.values()} if arm == "B" else plan.env
        if t.lever == PolicyEnv.name and arm == "A":
            # confirming a policy from the fleet: arm A is the run without it
            env = {k: v for k, v in plan.env.items() if k not in lever.values()}
            plan = dataclasses.replace(plan, policy_id=0, policy_status="")
            d.states.of(job.id).policy_id = 0
        cfg = d.config.experiments
        total = 2 * cfg.run_rounds
        # an early stop decides after any complete pair; otherwise run_rounds pairs
        length = f"2-{total}" if cfg.early_speedup > 0 else f"{total}"
        note = (
            f"launch trial {t.id}: {lever.describe()}, arm {arm} "
            f"({'with' if arm == 'B' else 'without'} it; run {len(t.runs)} of {length})"
        )
        log.info("job %s (%s): %s", job.id, job.name, note)
        return dataclasses.replace(plan, env=env, trial=note)

    def _still_confirming(self, t: LaunchTrial, plan: LaunchPlan) -> bool:
        """A confirmation trial goes on only while its policy is the one this launch gets and is
        still unconfirmed (not reverted by the fleet meanwhile, not replaced by a pin): otherwise it
        is abandoned, and this run is launched as it is."""
        pid = int(t.setting["policy"])
        try:
            p = self.d.library.get_policy(pid)
        except GitmdError:
            p = None
        if p is not None and self.unconfirmed(p) and plan.policy_id == pid:
            return True
        why = f"policy {pid} is no longer the one in force unconfirmed here"
        self.d.launch_trials.end(t, "abandoned", {"promote": False, "reason": why})
        log.info("launch trial %d (%s): abandoned: %s", t.id, t.lever, why)
        return False

    def run_ended(
        self,
        job_id: str,
        exit_code: int | None,
        metrics: dict[str, list[float]],
        run_s: float | None,
        crash: str,
        clock: str = "run_s",
        site: SiteReport | None = None,
    ) -> None:
        """A run of a launch trial has ended: recorded, and the trial decided once its pairs allow.
        ``run_s``: its length on ``clock`` ("run_s": the shim's, CUDA's start to the last exit;
        "cuda_s": the same by gitmd's clock library, for a run that went without the shim; "wall_s":
        its launcher's, exec to exit, for one whose launcher read no stamp). ``site``: what
        gitmd's sitecustomize did in it: B runs its lever changed nothing in end the trial
        (not_applicable): the lever cannot act in this program, and every further run of it would
        be spent for nothing."""
        d = self.d
        st = d.states.get(job_id)
        tid = st.trial_id if st is not None else None
        if st is None or tid is None:
            return
        st.trial_id = None
        t = d.launch_trials.finish_run(
            job_id, tid, run_s, exit_code, metrics, crashed=crash, clock=clock, site=site
        )
        if t is None:
            return
        why = not_applicable(t)
        if why:
            self._abandon(t, f"not applicable: {why}")
            return
        cfg = d.config.experiments
        job = d.jobs.get(job_id)
        if t.spoiled() >= MAX_SPOILED:
            self._abandon(t, f"{t.spoiled()} runs have no length by their own clock, crashed, or found "
                          "no run of their command line to pair with")  # fmt: skip
            return
        in_trial = {r["job_id"] for r in t.runs}
        # the spread of each command line its pairs are of: that line's plain runs
        earlier: dict[str, list[float]] = {}
        # for a slower lever's stop only, on a clock of runs without the shim: the line's runs with
        # the shim too (their lengths on the same milestones hold gitmd's cost: a wider spread)
        wide: dict[str, list[float]] | None = {} if t.clock() in ("wall_s", "cuda_s") else None
        for a, _ in t.pairs():
            if line(a) not in earlier:
                of = d.jobs.get(a["job_id"])
                same = (of.command, of.cwd)
                earlier[line(a)] = d.jobs.plain_runs_s(
                    of.launch_key, exclude=in_trial, clock=t.clock(), command=same
                )
                if wide is not None:
                    wide[line(a)] = d.jobs.plain_runs_s(
                        of.launch_key, exclude=in_trial, clock=t.clock(), command=same, with_shim=True
                    )
        dec = decide_trial(
            t, job.contract, cfg.run_rounds, cfg.min_gain, cfg.early_speedup, earlier, slower_plain_s=wide
        )
        if dec is None:
            return
        lever = t.lever_obj()
        decision = {**decision_json(dec), "runs": [r["job_id"] for r in t.runs]}
        state = "promoted" if dec.promote else "reverted"
        if not d.launch_trials.end(t, state, decision):
            return  # another run's end decided it meanwhile: recorded and kept once
        now = time.time_ns()
        arms = [
            {
                "arm": r["arm"],
                "window_id": 0,
                "run_s": r.get("run_s"),
                "clock": r.get("clock", "run_s"),
                "at_ns": now,
                "job_id": r["job_id"],
            }
            for r in t.runs
        ]
        e = d.experiments.record(job.id, lever, t.cause, state, arms, {**decision, "launch_trial": t.id})
        log.info("launch trial %d (%s on workload %s): %s — %s", t.id, lever.describe(), t.workload_id,
                 state, dec.reason)  # fmt: skip
        if t.lever == PolicyEnv.name:
            self.confirmed(int(t.setting["policy"]), dec, {"launch_trial": t.id, "experiment": e.id})
            return
        if not dec.promote or dec.interval is None:
            return
        # numbers the launcher reported decided the contract: the policy serves that user only
        reported = any(c.kind == "stdout_metric" for c in job.contract.checks)
        d.library.add_policy(
            t.workload_id,
            lever.values(),
            "validated",
            dec.interval.speedup,
            (dec.interval.low, dec.interval.high),
            {
                "source": "runs",
                "launch_trial": t.id,
                "experiment": e.id,
                "lever": lever.describe(),
                "pairs": dec.interval.pairs,
                "runs": [r["job_id"] for r in t.runs],
                "scheduler_job_ids": sorted(
                    {d.jobs.get(r["job_id"]).scheduler_job_id for r in t.runs} - {""}
                ),
                "reason": dec.reason,
                "metric": METRICS[t.clock()],
                "predicted_max": t.bound if t.bound != float("inf") else None,
                "predicted": t.predicted or None,
                "scope_uid": job.uid if reported else None,
                # what it was learned with: the trial's runs went without the shim, so the latest
                # observed run of the workload says
                "frameworks": d.jobs.workload_frameworks(t.workload_id),
            },
            gpu_model=d.gpu_model(),
            driver=d.backend.driver_version() or "",
        )

    def stalled(self, t: LaunchTrial) -> bool:
        """Abandon the trial (True) when MAX_FRESH runs of its workload have come since its latest
        arm (or since it was planned) and none took one, with no pair half done: its command lines
        do not recur (a seed or a date in every one, whether its launches were sure of the workload
        or only fingerprinted as it), so no pair can be made, and while it runs no other trial of
        the workload, live or launch, may start. Asked where a run of the workload meets the running
        trial: its launch (Trials.arm) and the trial planning after its windows (Choose)."""
        if t.half() is not None:
            return False
        since = t.created_ns
        if t.runs:
            try:
                since = max(since, self.d.jobs.get(t.runs[-1]["job_id"]).created_ns)
            except GitmdError:
                pass  # its latest run's job is gone: counted from the trial's start
        n = self.d.jobs.workload_runs_since(t.workload_id, since)
        if n < MAX_FRESH:
            return False
        why = (
            f"no pair could be made: {n} runs of the workload came since its latest arm and none could "
            "take one (command lines not launched here before, or not the half pair's)"
        )
        return self._abandon(t, why, as_read=True)

    def _abandon(self, t: LaunchTrial, why: str, as_read: bool = False) -> bool:
        """The trial ends undecided; a policy from the fleet it was confirming is not kept here
        (suspect only when a run with it crashed)."""
        if not self.d.launch_trials.end(t, "abandoned", {"promote": False, "reason": why}, as_read):
            return False  # ended meanwhile (another registration's thread: told once), or armed
        log.info("launch trial %d (%s): abandoned: %s", t.id, t.lever, why)
        if t.lever == PolicyEnv.name:
            crashed = any(r.get("crashed") and r["arm"] == "B" for r in t.runs)
            self.confirmed(int(t.setting["policy"]), Decision(False, f"not decided: {why}", None),
                           {"launch_trial": t.id}, suspect=crashed)  # fmt: skip
        return True

    def shutdown(self) -> None:
        with self.d.states.exp_lock:
            for cancel in self.d.states.running_experiments():
                cancel.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
