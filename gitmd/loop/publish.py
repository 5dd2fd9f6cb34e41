"""Jobs as the API sees them while the loop runs them: their views, their events, their phase."""

from __future__ import annotations

import dataclasses
import time

from gitmd.capture import duty
from gitmd.capture.windows import JobCapture
from gitmd.events import Watch
from gitmd.jobs.registry import Job
from gitmd.loop.deps import Deps
from gitmd.loop.state import Phase
from gitmd.loop.views import JobEvent, JobView, stored_view


class Publisher:
    def __init__(self, d: Deps) -> None:
        self.d = d

    def windows(self, job_id: str, jc: JobCapture | None = None) -> int:
        """Capture windows the job had: counted live while it is tracked, kept after it ends."""
        if jc is None and self.d.capture is not None:
            jc = self.d.capture.get(job_id)
        if jc is not None:
            return jc.windows
        st = self.d.states.get(job_id)
        return (st.windows_done or 0) if st is not None else 0

    def settled(self, job_id: str) -> bool:
        """Past start-up: a window has found the job's step, or STARTUP_WINDOWS windows have not
        (a job whose step is never found is judged on its windows all the same)."""
        st = self.d.states.get(job_id)
        if st is not None and st.steady:
            return True
        jc = self.d.capture.get(job_id) if self.d.capture is not None else None
        return jc is not None and jc.windows >= duty.STARTUP_WINDOWS

    def known(self, job_id: str) -> bool:
        """The job got its workload's validated policy at launch and, by default, nothing else:
        the recurring case runs with zero experiment windows (contended and transformer, H200
        2026-12-03: a launch with the policy was explored again for what remained of its cause)."""
        st = self.d.states.get(job_id)
        return bool(st and st.policy_id) and not self.d.config.experiments.explore_known

    def phase(self, job_id: str) -> Phase:
        st = self.d.states.of(job_id)
        if st.trial_id is not None:
            return Phase.TRIAL_RUN
        if st.experiment is not None:
            return Phase.EXPLORING
        if st.observed:
            return Phase.OBSERVED
        if self.known(job_id):
            return Phase.KNOWN
        if st.settling or not self.settled(job_id):
            return Phase.SETTLING
        return Phase.OBSERVING

    def note_phase(self, job_id: str) -> str:
        """The job's phase written to its row when it changed ("" for a job gitmd holds no state
        of, or that runs without the shim). Called where the loop moves a job on, and from views."""
        st = self.d.states.get(job_id)
        if st is None or not (st.captured or st.resting):
            return ""
        with st.phase_lock:
            phase = self.phase(job_id)
            if phase != st.phase:
                st.phase = phase
                self.d.jobs.set_phase(job_id, phase.value)
        return phase.value

    def view(self, job: Job, note_phase: bool = True) -> JobView:
        """``note_phase``: False at registration (its first phase is written at its next view: the
        registration path stays one write)."""
        d = self.d
        procs = d.capture.processes(job.id, wait=False) if d.capture is not None else []
        jc = d.capture.get(job.id) if d.capture is not None else None
        started = bool(procs) and job.state == "registered"
        if started:
            d.jobs.set_state(job.id, "running")
            job = dataclasses.replace(job, state="running")
        if job.state in ("exited", "lost"):
            view = stored_view(job)
        else:
            st = d.states.get(job.id)
            phase = self.note_phase(job.id) if note_phase else ""
            if phase:
                job = dataclasses.replace(job, phase=phase)
            steps, policy = (st.steps, st.policy_id) if st is not None else (None, 0)
            ranks = d.capture.ranks(job.id) if d.capture is not None else {}
            on_gpus = d.gpu_pids() if procs else {}
            gpus = {st_.pid: on_gpus[st_.pid] for st_, _ in procs if st_.pid in on_gpus}
            view = JobView(job, procs, self.windows(job.id, jc), steps, policy, ranks, gpus)
        if started:
            self.publish("running", view)
        return view

    def publish(self, kind: str, view: JobView) -> None:
        self.d.job_events.publish(JobEvent(kind, time.time_ns(), view))

    def watch(self, job_id: str) -> Watch[JobEvent]:
        return self.d.job_events.watch(self.d.alive, (lambda e: e.view.job.id == job_id) if job_id else None)
