"""Known: a recurring job's validated live policy, applied once its processes show and kept — no
trial. (Its launch-time part, the environment and the CPUs at exec, comes with the launch plan:
launch.py.)"""

from __future__ import annotations

import logging
import os
from typing import Any

from gitmd.jobs.registry import Job
from gitmd.levers.base import LeverError
from gitmd.levers.registry import make as make_lever
from gitmd.loop.deps import Deps
from gitmd.loop.observe import WINDOW_FREE_LEVERS
from gitmd.loop.state import LivePending
from gitmd.loop.targets import Targets
from gitmd.loop.trials import Trials

log = logging.getLogger(__name__)
LIVE_POLICY_WINDOWS = 5  # windows a run's live policy waits for its target to show
LIVE_POLICY_TICKS = 30  # duty ticks (~1 s) a window-free lever of it waits for its target to show


class Known:
    def __init__(self, d: Deps, targets: Targets, trials: Trials) -> None:
        self.d = d
        self.targets = targets
        self.trials = trials

    def window_free_pending(self, job_id: str) -> bool:
        """The job's live policy still has a lever that needs no window (WINDOW_FREE_LEVERS)."""
        st = self.d.states.get(job_id)
        live = st.live if st is not None else None
        if live is None or live.confirm:  # one from the fleet is tried in windows, not applied
            return False
        return any(x.get("lever") in WINDOW_FREE_LEVERS for x in live.items)

    def apply(self, job_id: str, window_free: bool = False) -> None:
        """A recurring job's validated live levers, applied once its processes are seen (the
        stream, the CPUs found anew in this run) and kept: no experiment, one window at most to
        learn what the lever acts on. A lever whose target is not there within LIVE_POLICY_WINDOWS
        windows is dropped (said in the log). ``window_free``: from the duty tick, with no window,
        only the levers that need none (WINDOW_FREE_LEVERS), and no window counted."""
        with self.d.states.live_lock:
            self._apply(job_id, window_free)

    def _apply(self, job_id: str, window_free: bool) -> None:
        d = self.d
        st = d.states.of(job_id)
        pending = st.live
        if pending is None:
            return
        pid, items, windows = pending.policy_id, pending.items, pending.windows
        job = d.jobs.get(job_id)
        if pending.confirm:
            if not window_free:
                self._confirm(job, pending)
            return
        left = []
        for item in items:
            if window_free and item.get("lever") not in WINDOW_FREE_LEVERS:
                left.append(item)
                continue
            if item.get("at_exec"):
                if self._set_at_exec(job, pid, item, left):
                    st.tried.add("cpu_affinity")
                continue
            lever = self.targets.live_lever(item["lever"], job)
            if lever is None:
                left.append(item)
                continue
            lever.setting.update(item.get("setting", {}))
            try:
                iv = d.interventions.apply(job_id, lever, self.targets.target(job_id))
                d.interventions.promote(iv.id, f"policy {pid} of the workload, at launch")
                log.info("job %s: %s from policy %d applied at launch", job_id, lever.describe(), pid)
            except LeverError as e:
                log.warning("job %s: policy %d's %s could not be applied: %s", job_id, pid, lever.name, e)
            st.tried.add(lever.name)  # known: no experiment on it in this run
        if window_free:
            st.live_ticks += 1
            if (
                st.live_ticks >= LIVE_POLICY_TICKS
            ):  # its processes have shown for that long: nothing to act on
                for item in [x for x in left if x.get("lever") in WINDOW_FREE_LEVERS]:
                    log.info(
                        "job %s: policy %d's %s found nothing to act on; not applied",
                        job_id,
                        pid,
                        item["lever"],
                    )
                left = [x for x in left if x.get("lever") not in WINDOW_FREE_LEVERS]
            if left:
                st.live = LivePending(pid, left, windows)
            else:
                st.live = None
                st.live_ticks = 0
            return
        if not left or windows + 1 >= LIVE_POLICY_WINDOWS:
            st.live = None
            for item in left:
                log.info(
                    "job %s: policy %d's %s found nothing to act on; not applied", job_id, pid, item["lever"]
                )
        else:
            st.live = LivePending(pid, left, windows + 1)

    def _confirm(self, job: Job, pending: LivePending) -> None:
        """A live policy from the fleet, not yet confirmed here: tried as a live trial on this run
        (A and B windows, the paired rule), its result the confirmation (Trials.confirmed). Its
        lever made for this run's processes; none there within LIVE_POLICY_WINDOWS windows: left
        unconfirmed (the next run tries again)."""
        d = self.d
        st = d.states.of(job.id)
        item = pending.items[0]
        lever = self.targets.live_lever(item["lever"], job)
        if lever is None:
            if pending.windows + 1 >= LIVE_POLICY_WINDOWS:
                st.live = None
                log.info("job %s: policy %d from the fleet found nothing to act on; not tried",
                         job.id, pending.policy_id)  # fmt: skip
            else:
                st.live = LivePending(pending.policy_id, pending.items, pending.windows + 1, confirm=True)
            return
        lever.setting.update(item.get("setting", {}))
        with d.states.exp_lock:
            if st.experiment is not None:
                return  # another trial first; this one waits for the next window
            st.live = None
            log.info("job %s: policy %d from the fleet, %s, is tried on this run to confirm it here",
                     job.id, pending.policy_id, lever.describe())  # fmt: skip
            self.trials.start_live(job.id, lever, "fleet", None, confirm=pending.policy_id)

    def _set_at_exec(self, job: Job, pid: int, item: dict[str, Any], left: list[dict[str, Any]]) -> bool:
        """A cpu_affinity policy the launch plan carried (``at_exec``): recorded as the policy's
        intervention, reverting to the CPUs the launcher started on, when the job's processes run
        on those CPUs (their launcher set them); otherwise gitmd sets them now (a launcher that does
        not honour LaunchPlan.cpus). False: no process to look at yet (``item`` left)."""
        d = self.d
        pids = self.targets.pids(job.id)
        if not pids:
            left.append(item)
            return False
        cpus = set(item["at_exec"])
        try:
            ran = all(os.sched_getaffinity(p) == cpus for p in pids)
        except OSError:
            left.append(item)
            return False
        lever = make_lever("cpu_affinity", cpus=sorted(cpus))
        try:
            target = self.targets.target(job.id)
            if ran:
                start = item.get("started_on") or sorted(cpus)
                now = lever.capture(target)
                saved = {part: {k: start for k in now[part]} for part in ("threads", "main")}
                iv = d.interventions.apply(job.id, lever, target, saved=saved)
                d.interventions.promote(iv.id, f"policy {pid} of the workload, set at exec by its launcher")
                log.info(
                    "job %s: %s from policy %d set by its launcher at exec", job.id, lever.describe(), pid
                )
                return True
            iv = d.interventions.apply(job.id, lever, target)
            d.interventions.promote(iv.id, f"policy {pid} of the workload, at launch")
            log.info(
                "job %s: %s from policy %d applied (its launcher did not set it)",
                job.id,
                lever.describe(),
                pid,
            )
        except LeverError as e:
            log.warning("job %s: policy %d's cpu_affinity could not be applied: %s", job.id, pid, e)
        return True
