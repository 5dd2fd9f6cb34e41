"""Observe: a job's capture windows, from the duty tick until its observation is done; each
window's steps and fingerprint (which workload it is)."""

from __future__ import annotations

import logging
import os
import time

from gitmd.analysis.fingerprint import signature
from gitmd.analysis.model import History
from gitmd.analysis.report import add_to_history
from gitmd.analysis.steps import JobSteps, job_steps
from gitmd.capture import capture_file, duty
from gitmd.capture.ring import RingStatus
from gitmd.capture.windows import WindowResult
from gitmd.jobs.frameworks import frameworks_of
from gitmd.jobs.launch import LaunchPlan
from gitmd.jobs.launch_key import command_key
from gitmd.jobs.registry import Job
from gitmd.loop.cost import amortised_gap, attached_model_s
from gitmd.loop.deps import Deps
from gitmd.loop.publish import Publisher

log = logging.getLogger(__name__)
# live levers whose target is the job's processes themselves (or its background co-tenants'): a
# policy of them is applied as soon as the processes show, with no capture window
WINDOW_FREE_LEVERS = frozenset({"cpu_affinity", "sched_priority", "cotenant_yield", "alloc_keep_cache_live"})
# A settling recurring job's observation (its first window and the rest of its stretch,
# capture.session_windows of them) is placed to end by this share of its program's shortest recent
# run: what a window switches on costs a launch-bound process for the rest of its life once switched
# off (kernel activity +3.5%, copies +2.9% a step, H200 2026-12-04, bench/cupti_residual.py), so a
# late stretch leaves less run to pay it; not at the very end, which is often not the steady state
# (evaluation, a checkpoint written).
LATE_SHARE = 0.8


def has_kernels(window: WindowResult) -> bool:
    """The window holds a kernel of the job's: something a cause can be read from."""
    return any(len(p.records.kernels) for p in window.processes)


class Observe:
    def __init__(self, d: Deps, pub: Publisher) -> None:
        self.d = d
        self.pub = pub

    # -- when windows come -----------------------------------------------------------------------
    def settles(self, job: Job, plan: LaunchPlan) -> str:
        """Why the job's first duty window waits until its processes are capture.settle_s old ("":
        it does not).
        From a process's first window on, CUPTI stays attached to it with its activity off (the shim
        never detaches it by default: detaching crashed jobs), which costs a launch-bound job ~40%;
        an earlier first window costs that for longer, and start-up rarely shows the step.
        A job is taken as long until it has shown otherwise: a first run waits (CuPy control, H200
        2026-12-03: its first 30-s run +18.1% with a window at start-up, its recurring ones +2.6%),
        as does a recurring job whose earlier runs under the shim (the latest three) all lasted at
        least twice settle_s from their CUDA start, and one that got its workload's policy and is
        not explored (known: contended's policy runs, H200 2026-12-03: 0.12-0.15 ms/step under
        the policy against 0.09 without gitmd).
        A job one of whose runs was shorter waits only for its observation to be placed late in its
        expected run (first_window_age_s: 0 when its whole stretch does not fit). One with a live
        policy whose lever needs a window to find what it acts on (a stream, a buffer) keeps the
        early window. A launch trial's run gets no window at all (it is timed whole)."""
        return self.settle_plan(job, plan)[0]

    def settle_plan(self, job: Job, plan: LaunchPlan) -> tuple[str, float]:
        """``settles``' reason, with how old the job's oldest process must be before its first window
        (first_window_age_s; 0.0 when it does not wait): both from one look at its earlier runs."""
        settle = self.d.config.capture.settle_s
        if settle <= 0 or plan.trial:
            return "", 0.0
        st = self.d.states.of(job.id)
        if st.live is not None and any(x.get("lever") not in WINDOW_FREE_LEVERS for x in st.live.items):
            return "", 0.0
        # on the clock the wait is counted on: a process's age, so the runs' CUDA lifetimes (from
        # registration they include the interpreter's start: timm's ResNet-50 runs lasted 21-23 s
        # that way and 9-10 s under CUDA, so every run waited 10 s and none got a window, H200
        # 2026-12-04)
        runs = self.d.jobs.program_runs_s(job, clock="run_s")
        age = self.first_window_age_s(job, runs)
        if self.pub.known(job.id):
            return "it got its workload's policy", age
        if not runs:
            return "a first run (taken as long until it has shown otherwise)", age
        if min(runs) >= 2 * settle:
            return f"its earlier runs lasted over {2 * settle:.0f} s", age
        if age > 0:
            return (
                f"its earlier runs lasted {min(runs):.1f} s under CUDA: its observation is placed late "
                "in its expected run",
                age,
            )
        return "", 0.0

    def first_window_age_s(self, job: Job, runs: list[float] | None = None) -> float:
        """How old a settling job's oldest process must be before its first window: capture.settle_s
        for a first run; for a recurring program (its latest runs' lengths known, the shim's clock,
        CUDA start to exit) late enough that its observation stretch (planned_stretch_s) ends by
        LATE_SHARE of the shortest of them, and never before settle_s when they all lasted at least
        twice that (0 for shorter ones: their start-up is most of their life). A run that is to
        continue a live trial of its workload does not wait longer than settle_s: its pairs need the
        time. ``runs``: its earlier runs' lengths (earlier_runs_s, the shim's clock), when the
        caller has them."""
        c = self.d.config.capture
        if runs is None:
            runs = self.d.jobs.program_runs_s(job, clock="run_s")
        if not runs:
            return c.settle_s
        # long runs, and a job that got its workload's policy (settles), never before settle_s
        floor = c.settle_s if min(runs) >= 2 * c.settle_s or self.pub.known(job.id) else 0.0
        if job.workload_id and any(
            state == "resumable" for state, _ in self.d.experiments.workload_trials(job.workload_id).values()
        ):
            return floor
        return max(floor, LATE_SHARE * min(runs) - self.planned_stretch_s(job, min(runs)))

    def planned_stretch_s(self, job: Job, life_s: float) -> float:
        """How long a run's observation is expected to last: a short first window, then
        session_windows windows a duty tick apart; shorter where the run's window budget
        (capture.overhead_budget of ``life_s``) pays for less, as budget_spent will count it: the
        windows at what an open window cost the program's latest observed run, and CUPTI left
        attached after the stretch until the end (1 - LATE_SHARE of the run). With no observed run
        known, a window is priced as the most the model lets it cost (all its time). Where the
        budget pays for no more than the first window, the stretch is that window alone (its run
        pays more than the budget: the backoff and capture.observation_budget spread it over the
        runs between observed ones)."""
        c = self.d.config.capture
        full = c.first_window_s + c.session_windows * (c.window_duration_s + duty.TICK_S)
        if c.overhead_budget <= 0:
            return full
        slowdown = self.d.jobs.program_window_slowdown(job)
        if slowdown is None:
            slowdown = 1.0
        if slowdown <= 0:
            return full  # its windows cost nothing measurable: the whole stretch
        attached = 0.0 if c.detach_cupti else slowdown * c.attached_cost_us / c.launch_cost_us
        tail = attached * (1 - LATE_SHARE) * life_s
        paid = (c.overhead_budget * life_s - tail) / slowdown  # window seconds the budget pays for
        return min(full, max(c.first_window_s, paid) + duty.TICK_S)

    def budget_spent(self, job_id: str) -> str:
        """Why the run's observation stops now, its window budget spent ("": it may go on). A
        recurring program's run may spend on its windows capture.overhead_budget of its expected
        length (the shortest of its latest runs, CUDA start to exit), by gitmd's launch-cost model:
        its windows so far (capture.launch_cost_us a launch), CUPTI left attached from its first
        window to the expected end (capture.attached_cost_us a launch; never detached), and one more
        window. Observing in one stretch, whatever the budget, cost timm's ResNet-18 bf16 training
        9.5% and 19% in its two observed runs: 3 windows took most of its 7-s life (H200
        2026-12-04). What one run could not see, the program's next observed run goes on with (the
        causes of its last window carry over). A first run's length is unknown: its observation is
        not bounded here."""
        d = self.d
        c = d.config.capture
        st = d.states.of(job_id)
        if c.overhead_budget <= 0 or not st.first_window_ns or st.window_s <= 0:
            return ""
        job = d.jobs.get(job_id)
        runs = d.jobs.program_runs_s(job, clock="run_s")
        if not runs:
            return ""
        life = min(runs)
        # its expected end, on the registration clock (its processes' start would take the capture
        # lock, which an open window holds)
        lasted = d.jobs.program_runs_s(job)
        end_ns = job.created_ns + int(min(lasted) * 1e9) if lasted else st.first_window_ns + int(life * 1e9)
        rate = st.window_kernels / st.window_s
        end_ns = max(end_ns, st.first_window_ns)
        # ending the observation detaches CUPTI where capture.detach_cupti lets it
        attached = 0.0
        if not c.detach_cupti:
            attached = attached_model_s(d, st, None, now_ns=end_ns, since_ns=job.created_ns)
        one_more = c.window_duration_s * min(1.0, rate * c.launch_cost_us * 1e-6)
        projected = st.window_model_s + attached + one_more
        if projected <= c.overhead_budget * life:
            return ""
        return (
            f"its window budget is spent: its windows and the CUPTI they leave attached would cost "
            f"{projected:.2f} s of its expected {life:.1f} s with one more window, over "
            f"capture.overhead_budget ({100 * c.overhead_budget:.1f}%)"
        )

    def rests(self, job: Job, plan: LaunchPlan, surely: bool = True) -> str:
        """Why this run of a recurring program gets no capture window at all ("" : it may get them):
        its program was observed on enough earlier runs, and the backoff says this one is not due
        (capture.reobserve_every, observe_runs). Windows cost a run whatever they find (from its first
        one CUPTI stays attached: a short timm training lost 15% a run, H200 2026-12-04); once its
        causes are known and its levers tried, observing every run only costs. Observed regardless:
        a run that continues a live trial of its workload (unless that trial's last two runs added
        no pair: ExperimentStore.stalled), carries a live policy that acts through a window or a
        fleet policy to confirm, and every run while observe_runs runs are not yet seen. A launch
        trial's run gets no window anyway. A resting run goes without the shim (Launch.register).
        A launch that is ``surely`` a run of the workload it resolved to (Launch.workload_at_launch)
        counts the workload's observed runs: not its script's, whose other arguments may be other
        programs (six of timm's benchmark.py --model X, each observed once, made each other's runs
        rest). One that is not counts the observed runs of its exact command line only: its script
        may run another program by these arguments, which would otherwise never be seen."""
        c = self.d.config.capture
        if c.reobserve_every <= 0 or plan.trial or not job.launch_key:
            return ""
        st = self.d.states.of(job.id)
        if st.live is not None and (st.live.confirm or any(x.get("lever") not in WINDOW_FREE_LEVERS
                                                            for x in st.live.items)):  # fmt: skip
            return ""
        # the backoff first (two indexed counts on every registration); the workload's trials and
        # contract are looked up only for a run it would leave unobserved
        if surely and job.workload_id:
            record = self.d.jobs.observation_record(
                job.launch_key, job.created_ns, workload_id=job.workload_id
            )
        else:
            record = self.d.jobs.observation_record(job.launch_key, job.created_ns)
        observed, since, last_ns = record
        if observed < c.observe_runs:
            return ""
        if not surely:  # only its own command line's runs (never more than the key's: asked second)
            observed, since, last_ns = self.d.jobs.observation_record(
                job.launch_key, job.created_ns, (job.command, job.cwd)
            )
            if observed < c.observe_runs:
                return ""
        gap = min(2 ** (observed - c.observe_runs + 1) - 1, c.reobserve_every - 1)
        dear = ""
        if since >= gap:
            # due by the backoff: unless its observed runs cost it more than the budget allows
            # when spread over the runs between them (only asked here: most runs are not due)
            amortised, dear = amortised_gap(self.d, job)
            gap = min(max(gap, amortised), c.reobserve_every - 1)
            if since >= gap:
                return ""
        ex = self.d.config.experiments
        if ex.enabled and job.allow_exploration and not self.pub.known(job.id):
            for lever, (state, tried_ns) in self.d.experiments.workload_trials(job.workload_id).items():
                # a live trial an earlier run ended before deciding: this run continues it, unless
                # two observed runs since did not (its cause gone), or its last two runs each ended
                # before a pair of its own (runs too short for it): then it waits for the backoff
                if (
                    state == "resumable"
                    and lever in ex.live_levers
                    and self.d.jobs.observed_between(job.workload_id, tried_ns, job.created_ns) < 2
                    and not self.d.experiments.stalled(job.workload_id, lever)
                ):
                    return ""
        if job.workload_id and self.d.library.contract(job.workload_id, job.uid)[1] > last_ns:
            return ""  # consent given since it was last observed: numerics levers may now be tried
        return (
            f"its program was observed on {observed} earlier runs; this run is not observed (the next "
            f"in {gap - since} runs: capture.reobserve_every{dear})"
        )

    def unsettled(self, job_id: str, procs: list[tuple[RingStatus, bool]]) -> bool:
        """A settling job whose oldest live process is younger than its first window's age
        (first_window_age_s, set at its launch; capture.settle_s by default)."""
        st = self.d.states.of(job_id)
        if not st.settling:
            return False
        born = [s.created_real_ns for s, alive in procs if alive and s.created_real_ns]
        age_s = st.settle_age_s or self.d.config.capture.settle_s
        if born and time.time_ns() - min(born) < age_s * 1e9:
            return True
        st.settling = False  # settled: from now on its windows come as any job's
        self.pub.note_phase(job_id)
        log.info("job %s: its processes have settled; first capture window now", job_id)
        return False

    def ready(self, job_id: str, now_mono: float) -> bool:
        """The duty tick's first question: is the job due (no window open, its period past), with
        no live trial taking its windows, and a live process?"""
        d = self.d
        assert d.capture is not None
        jc = d.capture.get(job_id)
        if jc is None or jc.lock.locked() or now_mono < jc.next_due_mono:
            return False  # a window open, or not due: the period is stretched to hold the overhead budget
        st = d.states.of(job_id)
        with d.states.exp_lock:
            if st.experiment is not None:
                return False  # its experiment opens the windows it needs
        return any(alive for _, alive in d.capture.processes(job_id))

    def wants_window(self, job_id: str) -> bool:
        """The second: a ready job gets a window unless it is a launch trial's run, its observation
        has ended, or it is still settling."""
        d = self.d
        assert d.capture is not None
        st = d.states.of(job_id)
        if st.trial_id is not None:
            return False  # measured by its own clock: CUPTI never attached to either arm
        if st.resting:
            return False  # earlier runs observed its program (rests)
        if not d.capture.observable(job_id):
            return False  # every live process's observation has ended
        jc = d.capture.get(job_id)
        return not (
            jc is not None and jc.windows == 0 and self.unsettled(job_id, d.capture.processes(job_id))
        )

    def window(self, job_id: str) -> tuple[WindowResult, bool] | None:
        """A duty window of the job, analysed (after_window); with whether it was the short first
        probe. None when the job ended meanwhile or capture failed."""
        d = self.d
        assert d.capture is not None
        c = d.config.capture
        jc = d.capture.get(job_id)
        duration = c.window_duration_s
        probe = jc is not None and jc.period_s == 0.0 and 0 < c.first_window_s < duration
        if probe:
            duration = c.first_window_s  # its launch rate is unknown yet: see duty.py
        period_now = max(jc.period_s if jc is not None else 0.0, c.window_every_s)
        cap = duty.window_records(period_now, c.overhead_budget, c.launch_cost_us)
        need = self.step_records(job_id)
        if need is not None:
            cap = need if cap is None else min(cap, need)
        try:
            w = d.capture.capture(job_id, duration, max_records=cap)
        except KeyError:
            return None  # the job exited meanwhile
        except Exception:
            log.exception("capture window of job %s failed", job_id)
            return None
        self.after_window(w)
        return w, probe

    def step_records(self, job_id: str) -> int | None:
        """What the job's next window needs once a window has found its step: WINDOW_STEPS of its
        steps (duty.step_records), at the records all its processes wrote in its latest window per
        kernel of the stepping one. None: no step known."""
        st = self.d.states.get(job_id)
        if st is None or st.steps is None or not st.steps.stats.found or st.newest is None:
            return None
        main = next((p for p in st.newest.processes if p.pid == st.steps.pid), None)
        if main is None:
            return None
        records = sum(  # every record the ring counts as written: the cap is on that count
            r.count + len(r.clocks) + len(r.windows) + len(r.payloads) + len(r.hostsrcs)
            for r in (p.records for p in st.newest.processes)
        )
        return duty.step_records(st.steps.stats.period_kernels, records, len(main.records.kernels))

    def schedule_next(self, job_id: str, w: WindowResult) -> None:
        """When the job's next window is due: a tick later while it settles or is observed, else
        the period that holds the overhead budget."""
        d = self.d
        assert d.capture is not None
        c = d.config.capture
        kernels = sum(len(p.records.kernels) for p in w.processes)
        window_s = (w.end_real_ns - w.start_real_ns) / 1e9
        period = duty.next_period(
            kernels, window_s, c.window_every_s, c.overhead_budget, c.launch_cost_us, c.window_duration_s
        )
        jc = d.capture.get(job_id)
        if jc is None:
            return
        if not self.pub.settled(job_id) or self.short_of_evidence(job_id, jc.windows):
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

    def full_window_now(self, job_id: str, probe: bool) -> bool:
        """After the short first probe: a full window fits the budget, so it comes now, not a period
        later."""
        jc = self.d.capture.get(job_id) if self.d.capture is not None else None
        return probe and jc is not None and jc.period_s <= self.d.config.capture.window_every_s

    # -- when they stop --------------------------------------------------------------------------
    def short_of_evidence(self, job_id: str, windows: int) -> bool:
        """Fewer than capture.session_windows windows with kernels past start-up, and fewer than
        that many and STARTUP_WINDOWS more in all (a job that shows no kernel is not watched
        forever)."""
        n = self.d.config.capture.session_windows
        return self.d.states.of(job_id).evidence < n and windows < n + duty.STARTUP_WINDOWS

    def observation_done(self, job_id: str) -> bool:
        """gitmd has seen enough of the job's processes: capture.session_windows windows with kernels
        analysed past start-up (or, for a job that shows none, that many and STARTUP_WINDOWS more
        windows in all), or its run's window budget is spent (budget_spent); no experiment on it,
        and no live lever left that acts through a window."""
        return self._observation_end(job_id)[0]

    def _observation_end(self, job_id: str) -> tuple[bool, str]:
        """observation_done, with why its run's window budget cut it short ("": it did not)."""
        d = self.d
        jc = d.capture.get(job_id) if d.capture is not None else None
        if jc is None:
            return False, ""
        st = d.states.of(job_id)
        with d.states.exp_lock:
            if st.experiment is not None:
                return False, ""
        short = not self.pub.settled(job_id) or self.short_of_evidence(job_id, jc.windows)
        spent = self.budget_spent(job_id) if short else ""
        if short and not spent:
            return False, ""
        return not (st.live and any(x.get("lever") not in WINDOW_FREE_LEVERS for x in st.live.items)), spent

    def end_if_done(self, job_id: str) -> bool:
        """When the job's observation is done its processes get no window again, and their shims are
        told (they detach CUPTI then, once, only with capture.detach_cupti). True: it ended."""
        if self.d.capture is None:
            return False
        done, spent = self._observation_end(job_id)  # spent: the budget cut it short
        if not done:
            return False
        answers = self.d.capture.end_observation(job_id)
        st = self.d.states.of(job_id)
        st.observed, st.observation_end_ns = True, time.time_ns()
        st.observation_note = spent
        self.pub.note_phase(job_id)
        if answers or spent:
            log.info(
                "job %s: observation ended after %d windows%s, no more windows (%s)",
                job_id,
                self.pub.windows(job_id),
                f" ({spent})" if spent else "",
                ", ".join(f"pid {p}: {a}" for p, a in sorted(answers.items())),
            )
        return True

    # -- what a window shows -----------------------------------------------------------------------
    def keep_window(self, window: WindowResult) -> None:
        """capture.keep_windows: the window written under the state directory, the job's oldest
        beyond that many removed. A failure is logged, never raised: diagnosis only."""
        keep = self.d.config.capture.keep_windows
        if keep <= 0:
            return
        d = self.d.config.daemon.state_dir / "windows" / window.job_id
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

    def after_window(self, window: WindowResult) -> JobSteps | None:
        """Steps and fingerprint of a finished window (when it shows them); always a "window" event."""
        d = self.d
        self.keep_window(window)
        st = d.states.of(window.job_id)
        prev = st.newest
        if prev is not None and prev is not window:
            if st.history is None:
                st.history = History()
            add_to_history(st.history, prev)
        st.newest = window
        steps = job_steps(window)
        job = d.jobs.get(window.job_id)
        if steps is not None:
            st.steps = steps
            if steps.stats.found and steps.stats.steps > 0:
                st.steady = True
        if st.steady and has_kernels(window):
            st.evidence += 1
        window_s = max(0.0, (window.end_real_ns - window.start_real_ns) / 1e9)
        kernels = sum(len(p.records.kernels) for p in window.processes)
        st.window_s += window_s
        st.window_kernels += kernels
        if window_s > 0 and not st.first_window_ns:
            st.first_window_ns = window.start_real_ns
        model = duty.slowdown_in_window(kernels, window_s, d.config.capture.launch_cost_us)
        st.window_model_s += window_s * min(1.0, model)
        if not st.frameworks_seen and window.processes:
            st.frameworks_seen = True
            self.record_frameworks(job.id, steps.pid if steps is not None else window.processes[0].pid)
        if steps is not None:
            main = next(p for p in window.processes if p.pid == steps.pid)
            sig = signature(main.records, steps.stats)
            # A job identified already is not fingerprinted again while gitmd has changed it (an
            # experiment's treatment, a promoted lever): its step looks different then, and would
            # be taken for another workload — its policy stored there, never found at the next launch.
            if sig is not None and job.workload_id and self.changed(job.id):
                sig = None
            if sig is not None:
                first = not st.fingerprinted
                workload_id = d.library.observe(
                    sig,
                    job.launch_key,
                    job.name,
                    new_run=first,
                    owner_uid=job.uid,
                    command_key=command_key(job.launch_key, list(job.command), job.cwd),
                )
                st.fingerprinted = True
                if workload_id != job.workload_id:
                    d.jobs.set_workload(job.id, workload_id)
                    job = d.jobs.get(job.id)
        self.pub.publish("window", self.pub.view(job))
        return steps

    def record_frameworks(self, job_id: str, pid: int) -> None:
        """The frameworks the job's process runs, kept with the job: a policy learned on its
        workload says what it was learned with (never in the way of the window)."""
        try:
            found = frameworks_of(pid)
            if found:
                self.d.jobs.set_frameworks(job_id, found)
        except Exception:
            log.exception("the frameworks of job %s's process %d could not be read", job_id, pid)

    def changed(self, job_id: str) -> bool:
        """Something gitmd applied is in force on the job: a policy or a launch trial's arm at
        launch, a live experiment or lever now."""
        st = self.d.states.of(job_id)
        if st.policy_id or st.trial_id is not None:
            return True
        with self.d.states.exp_lock:
            if st.experiment is not None:
                return True
        live = ("applying", "applied", "promoted")
        return any(iv.state in live for iv in self.d.interventions.list(job_id))
