"""gitmd's control loop, one stage a module, calls going one way (down to analysis, levers,
capture, experiments and the store; none of them calls back):

    launch.py    a registered job's start: its workload's known-good policy, a launch trial's arm
    observe.py   capture windows on the duty tick; each window's steps and fingerprint
    attribute.py the window's causes and what each costs (analysis/)
    choose.py    which trial a cause selects: a live one now, or a launch trial over the next runs
    trials.py    a trial run as a controlled experiment, kept only when measurably faster with the
                 outputs unchanged, else rolled back; a kept one becomes a policy of the workload
    known.py     a recurring job's validated live policy, applied and kept (no trial)
    exits.py     a job's end: its run's own clock, a crash told apart, its launch trial's run
    targets.py   what a live lever acts on in a job (its processes, stream, buffers, CPUs)
    state.py     each job's place in the loop (JobState, Phase); publish.py its view and events

Loop.run_window is the loop, once per window; the rest of it happens when a live trial decides
(trials.run_live) and when a launch trial's run exits (exits.exited -> trials.run_ended).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gitmd.errors import GitmdError
from gitmd.loop.attribute import Attribute
from gitmd.loop.choose import Choose
from gitmd.loop.deps import Deps
from gitmd.loop.exits import Exits
from gitmd.loop.known import Known
from gitmd.loop.launch import Launch
from gitmd.loop.observe import Observe, has_kernels
from gitmd.loop.publish import Publisher
from gitmd.loop.targets import Targets
from gitmd.loop.trials import Trials

log = logging.getLogger(__name__)
WINDOW_WORKERS = 4  # capture windows open at once, all jobs together
WINDOWS_PER_USER = 2  # ... of one user's jobs (the others always find a worker)
# a window submitted by the duty tick makes its job not due for its length and this long after: its
# analysis sets the next due time (a window that failed makes it due at once)
ANALYSIS_GRACE_S = 30.0


class Loop:
    def __init__(self, d: Deps) -> None:
        self.d = d
        self.pub = Publisher(d)
        self.observe = Observe(d, self.pub)
        self.attribute = Attribute(d, self.observe)
        self.targets = Targets(d)
        self.trials = Trials(d, self.observe, self.targets, self.pub)
        self.known = Known(d, self.targets, self.trials)
        self.choose = Choose(d, self.pub, self.attribute, self.targets, self.trials)
        self.launch = Launch(d, self.pub, self.observe, self.targets, self.trials)
        self.exits = Exits(d, self.pub, self.trials, self.attribute)
        self.pool = ThreadPoolExecutor(max_workers=WINDOW_WORKERS, thread_name_prefix="window")
        # windows queued or open per job owner: one user's unresponsive rings held all four workers
        # and delayed another user's live policy by 3 minutes (hardening issue, item 4)
        self._windows_of: dict[int, int] = {}
        self._owner: dict[str, tuple[int, int]] = {}  # job id -> (its uid, its windows queued or open)
        self.windows_per_user = WINDOWS_PER_USER
        self._windows_lock = threading.Lock()

    def tick(self) -> None:
        """The duty tick: a window for every job that is due one (each in the window pool)."""
        if self.d.capture is None:
            return
        now = time.monotonic()
        paused = self.d.pause.on  # gitmctl pause: no window; known policies still apply
        for job_id in self.d.capture.job_ids():
            if not self.observe.ready(job_id, now):
                continue
            if self.known.window_free_pending(job_id):  # no window needed (it samples CPUs: off the tick)
                self.pool.submit(functools.partial(self.known.apply, window_free=True), job_id)
            if not paused and self.observe.wants_window(job_id) and self.submit_window(job_id):
                # not due again while this window is taken and analysed (schedule_next then says
                # when): a tick in between saw it due and opened a second first window (the lock
                # is free once the capture ends, the next due time set only after the analysis)
                jc = self.d.capture.get(job_id)
                if jc is not None:
                    jc.next_due_mono = now + self.d.config.capture.window_duration_s + ANALYSIS_GRACE_S

    def submit_window(self, job_id: str) -> bool:
        """A window for the job in the pool, unless its user has WINDOWS_PER_USER queued or open
        already (then the next tick tries again): no user's jobs take every window worker."""
        try:
            uid = self.d.jobs.get(job_id).uid
        except GitmdError:
            return False
        with self._windows_lock:
            if self._windows_of.get(uid, 0) >= self.windows_per_user:
                return False
            self._windows_of[uid] = self._windows_of.get(uid, 0) + 1
            self._owner[job_id] = (uid, self._owner.get(job_id, (uid, 0))[1] + 1)
        self.pool.submit(self.counted_window, job_id)
        return True

    def counted_window(self, job_id: str) -> None:
        """run_window, its place among its user's windows given back when it is done."""
        try:
            self.run_window(job_id)
        finally:
            with self._windows_lock:
                uid, n = self._owner.pop(job_id, (-1, 0))
                if n > 1:
                    self._owner[job_id] = (uid, n - 1)
                left = self._windows_of.get(uid, 1) - 1
                if left > 0:
                    self._windows_of[uid] = left
                else:
                    self._windows_of.pop(uid, None)

    def set_pause(self, paused: bool, by: str, reason: str = "") -> None:
        """`gitmctl pause`: no capture window and no new trial from now on, and the live trials
        running are stopped (their changes reverted); policies still apply at launch and stay in
        force. `gitmctl resume` undoes it. Kept across restarts."""
        self.d.pause.set(paused, by, reason)
        if paused:
            for job_id in self.d.capture.job_ids() if self.d.capture is not None else []:
                st = self.d.states.get(job_id)
                if st is not None and st.experiment is not None:
                    self.trials.end_live(job_id, f"gitmd paused by {by}")

    def run_window(self, job_id: str) -> None:
        """The loop, once per observation window of a running job."""
        if self.d.pause.on:
            return  # paused meanwhile (gitmctl pause)
        got = self.observe.window(job_id)  # observe: a capture window, its steps, its workload
        if got is None:
            jc = self.d.capture.get(job_id) if self.d.capture is not None else None
            if jc is not None:
                jc.next_due_mono = 0.0  # no window was taken: due again at the next tick
            return
        window, probe = got
        st = self.d.states.of(job_id)
        with st.step:  # one step at a time per job (state.JobState.step)
            try:
                self.known.apply(job_id)  # known: the workload's validated live policy, kept
                if has_kernels(window):  # a window without kernels shows no cause (observe.has_kernels)
                    live = self.choose.live(job_id)  # attribute, choose: a live trial on this run now
                    launch = self.choose.launch(job_id)  # ... or a launch trial over its next runs
                    idle = f"live: {live}; launch: {launch}" if live and launch else ""
                    said = f"live: {live}" if live else ""  # why this run got no live trial, said once
                else:
                    idle = "its latest window held no kernel (start-up, a CPU phase, or records late)"
                    said = idle
                if said and said != st.said:
                    # at INFO: on the H200 a contended job's live trial never started and nothing said why
                    log.info("job %s: no live trial after window %d: %s", job_id, window.window_id, said)
                st.idle, st.said = idle, said
            except Exception:
                log.exception("planning an experiment on job %s failed", job_id)
            self.observe.schedule_next(job_id, window)
            with self.d.states.exp_lock:
                if st.experiment is not None:
                    return  # its live trial opens the windows it needs, and ends the observation
            if self.observe.end_if_done(job_id):
                return  # observed enough: no window again
        if self.observe.full_window_now(job_id, probe):
            self.submit_window(job_id)

    def shutdown(self) -> None:
        """The window pool stopped (the facade has ended the live trials first: Trials.shutdown)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.attribute.shutdown()  # an ended job's last window, stored before the store closes


__all__ = ["Deps", "Loop"]
