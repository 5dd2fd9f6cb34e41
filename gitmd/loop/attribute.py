"""Attribute: a job's window analysed into causes and what each cost (analysis/report.py), kept
per job; and which causes showed in two windows in a row (what the loop acts on)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gitmd.analysis import report_codec
from gitmd.analysis.report import WindowReport, window_report
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.experiments.equivalence import Contract
from gitmd.jobs.registry import Job
from gitmd.levers.describe import catalog
from gitmd.loop.deps import Deps
from gitmd.loop.observe import Observe

log = logging.getLogger(__name__)
REPORTS_KEPT = 8  # attribution reports kept per running job (gitmctl explain --window)


class Attribute:
    def __init__(self, d: Deps, observe: Observe) -> None:
        self.d = d
        self.observe = observe
        # an ended job's last window, analysed after its exit report was answered (keep)
        self._late = ThreadPoolExecutor(max_workers=1, thread_name_prefix="late-report")
        self._pending: dict[str, Future[None]] = {}
        self._pending_lock = threading.Lock()

    def explain(self, job: Job, window_id: int = 0) -> WindowReport:
        """``report`` for a reader (gitmctl explain): with a note of why the latest window started
        no trial, when none runs."""
        rep = self.report(job, window_id)
        st = self.d.states.get(job.id)
        if st is None or job.state not in ("registered", "running"):
            return rep
        if st.resting:
            return dataclasses.replace(rep, notes=[*rep.notes, f"no duty window on this run: {st.resting}"])
        notes = [f"its observation ended: {st.observation_note}"] if st.observation_note else []
        if st.idle:
            notes.append(f"nothing tried after its latest window: {st.idle}")
        return dataclasses.replace(rep, notes=[*rep.notes, *notes]) if notes else rep

    def report(self, job: Job, window_id: int = 0) -> WindowReport:
        """A window of the job analysed: the latest (taken now if there is none yet), or one of the
        REPORTS_KEPT latest reports by window id."""
        d = self.d
        st = d.states.of(job.id)
        kept = st.reports
        if window_id and window_id in kept:
            return kept[window_id]
        jc = d.capture.get(job.id) if d.capture is not None else None
        if jc is None and job.state in ("exited", "lost"):
            return self._kept(job, window_id)
        if jc is None:
            why = self._uncaptured(job)
            raise InvalidArgumentError(f"job {job.id} ({job.name}) {why}: nothing to explain")
        window = jc.last
        if window is None:
            assert d.capture is not None
            window = d.capture.capture(job.id, d.config.capture.window_duration_s)
            self.observe.after_window(window)
        if window_id and window_id != window.window_id:
            held = sorted({*kept, window.window_id})
            raise NotFoundError(
                f"window {window_id} of job {job.id} is not held; gitmd keeps the latest window and "
                f"the reports it made: {', '.join(map(str, held))}"
            )
        if window.window_id in kept:
            return kept[window.window_id]
        report = window_report(window, history=st.history, tester=d.granger)
        kept[window.window_id] = report
        for old in sorted(kept)[:-REPORTS_KEPT]:
            del kept[old]
        return report

    def _uncaptured(self, job: Job) -> str:
        """Why a running job has no window to explain: it runs without the shim, and why."""
        st = self.d.states.get(job.id)
        if st is not None and st.resting:
            return f"runs without gitmd's capture ({st.resting})"
        if st is not None and st.trial_id is not None:
            return (
                f"is a run of launch trial {st.trial_id}: timed whole by its launcher, without gitmd's "
                "capture (`gitmctl library show` has the trial)"
            )
        if self.d.capture is None:
            return "is not captured (this gitmd has no capture: no shim was found)"
        return "is not captured (registered without capture, or its shim could not be used)"

    def _kept(self, job: Job, window_id: int) -> WindowReport:
        """An ended job's report, as kept when it ended (exits.py): its latest, or one by window id."""
        self.settle(job.id)
        got = self.d.reports.get(job.id, window_id)
        if got is None:
            code = f", exit {job.exit_code}" if job.exit_code is not None else ""
            crash = f"; {job.crash}" if job.crash else ""
            held = self.d.reports.windows(job.id)
            if window_id and held:
                kept = ", ".join(map(str, held))
                raise NotFoundError(f"window {window_id} of job {job.id} is not kept; kept: {kept}")
            raise InvalidArgumentError(
                f"job {job.id} ({job.name}) has ended ({job.state}{code}{crash}) and no window of it was "
                "analysed: `gitmctl job` shows what its run came to"
            )
        try:
            rep = report_codec.loads(got[1])
        except ValueError as e:
            raise InvalidArgumentError(f"job {job.id}'s kept report cannot be read: {e}") from None
        code = f", exit {job.exit_code}" if job.exit_code is not None else ""
        crash = f"; {job.crash}" if job.crash else ""
        ended = f"the job has ended ({job.state}{code}{crash}): this is its report as kept then"
        return dataclasses.replace(rep, notes=[ended, *rep.notes])

    def numerics_hints(self, workload_id: str, contract: Contract) -> list[dict[str, object]]:
        """Numerics-changing launch levers (TF32, cuDNN autotuning) that a cause above threshold in
        the workload's latest kept report selects, while ``contract`` (the workload's) compares no
        numbers: gitmd may not try them, and `gitmctl library show` says what they may recover and
        how to let it (convergence issue, item 4)."""
        if any(c.kind == "stdout_metric" for c in contract.checks):
            return []  # a number compared: gitmd may try them (choose.launch asks the same)
        numeric = {x.name: x for x in catalog() if x.risk == "numerics-changing" and x.launch}
        for job_id in self.d.jobs.latest_of_workload(workload_id):
            got = self.d.reports.get(job_id)
            if got is None:
                continue
            try:
                rep = report_codec.loads(got[1])
            except ValueError:
                continue
            out: list[dict[str, object]] = []
            for c in rep.causes:
                if not c.above_threshold:
                    continue
                for name in c.levers:
                    if name in numeric:
                        out.append({"lever": name, "summary": numeric[name].summary, "cause": c.name,
                                    "share": c.share, "ceiling": c.ceiling, "job_id": job_id})  # fmt: skip
            return out
        return []

    def keep(self, job_id: str) -> None:
        """The job is ending: its reports kept in the store. The reports its windows made are stored
        now; its latest window, when no report was made of it, is analysed after the exit report
        has been answered (without Granger tests), then stored: the launcher waits for that answer
        before it can exit with the job's status, and after runs with windows that answer came up
        to 0.12 s later than after runs without (H100 2026-12-07; this analysis was the work the
        report did only for them). A reader of the ended job (`gitmctl explain`) waits for it
        (settle)."""
        st = self.d.states.get(job_id)
        if st is None:
            return
        reports = dict(st.reports)
        note = f"its observation ended: {st.observation_note}" if st.observation_note else ""
        newest = st.newest if st.newest is not None and st.newest.window_id not in reports else None
        if reports and note and newest is None:  # the note goes on the latest report
            last = max(reports)
            reports[last] = dataclasses.replace(reports[last], notes=[*reports[last].notes, note])
        if reports:
            self._store(job_id, reports)
        if newest is None:
            return
        history = st.history
        with self._pending_lock:
            try:
                self._pending[job_id] = self._late.submit(self._keep_late, job_id, newest, history, note)
            except RuntimeError:  # gitmd is stopping: made here, as before
                self._keep_late(job_id, newest, history, note)

    def _keep_late(self, job_id: str, window: Any, history: Any, note: str) -> None:
        try:
            rep = window_report(window, history=history, tester=None)
            if note:
                rep = dataclasses.replace(rep, notes=[*rep.notes, note])
            self._store(job_id, {window.window_id: rep})
        except Exception:
            log.exception("the last window of job %s could not be analysed", job_id)
        finally:
            with self._pending_lock:
                self._pending.pop(job_id, None)

    def _store(self, job_id: str, reports: dict[int, WindowReport]) -> None:
        try:
            self.d.reports.keep(job_id, {w: report_codec.dumps(r) for w, r in reports.items()})
        except Exception:
            log.exception("keeping the reports of job %s failed", job_id)

    def settle(self, job_id: str, timeout_s: float = 30.0) -> None:
        """The ended job's last window stored, where keep left it to be analysed (none: at once)."""
        with self._pending_lock:
            got = self._pending.get(job_id)
        if got is not None:
            try:
                got.result(timeout=timeout_s)
            except Exception:  # logged by _keep_late; the reader gets what was stored
                pass

    def shutdown(self) -> None:
        """The late reports already asked for are made and stored; no new one is taken."""
        self._late.shutdown(wait=True)

    def earlier_causes(self, job: Job, report: WindowReport) -> set[str]:
        """The causes above threshold in the window before ``report``'s: of this run, or for its
        first window, the previous run's last one (runs shorter than two windows are common: a 15-s
        job gets a short first window and one full window). Experiments and launch trials act only
        on a cause seen in two windows in a row: one window can be start-up (a model's weights
        copied from pageable memory once look like a pageable-copy cause; a bf16 job's warm-up
        looked like a 25% sync stall on the H200, 2026-12-03, and a CPU experiment ran on it)."""
        now = {c.name for c in report.causes if c.above_threshold}
        st = self.d.states.of(job.id)
        by_workload = self.d.states.workload_causes
        first = st.causes is None
        wid, seen, earlier = st.causes or (-1, set(), set())
        if wid != report.window_id:
            earlier = (
                (by_workload.get(job.workload_id, set()) if job.workload_id else set()) if first else seen
            )
            st.causes = (report.window_id, now, earlier)
            if job.workload_id:
                by_workload[job.workload_id] = now
        return earlier
