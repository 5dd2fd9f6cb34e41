"""A job's phase in the loop: derived from its state, written to its row when it changes, kept
after it has ended (the store is what outlives gitmd's memory)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from gitmd.jobs.registry import Registration
from gitmd.loop.state import Phase
from tests.unit.loop.helpers import live_ring, make_service


def test_a_jobs_phase_follows_the_loop_and_outlives_it(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("p", ("prog",), "/", os.getuid(), os.getgid()))
    job_id = view.job.id
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    st = svc.states.of(job_id)
    assert st.settling  # a first run: its first window waits for it to settle
    assert svc.get_job(job_id).job.phase == Phase.SETTLING
    st.settling, st.steady = False, True  # a window found its step
    assert svc.get_job(job_id).job.phase == Phase.OBSERVING
    st.experiment = threading.Event()  # a live trial changes it
    assert svc.get_job(job_id).job.phase == Phase.EXPLORING
    st.experiment = None
    st.observed = True
    assert svc.get_job(job_id).job.phase == Phase.OBSERVED
    ended = svc.report_exit(job_id, 0)
    assert ended.job.phase == Phase.OBSERVED and svc.states.get(job_id) is None
    assert svc.jobs.get(job_id).phase == "observed"  # from the store


def test_a_launch_trials_run_and_a_known_job_say_so(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("t", ("prog",), "/", os.getuid(), os.getgid()))
    svc.states.of(view.job.id).trial_id = 3
    assert svc.get_job(view.job.id).job.phase == Phase.TRIAL_RUN
    other, _ = svc.register_job(Registration("k", ("prog2",), "/", os.getuid(), os.getgid()))
    svc.states.of(other.job.id).policy_id = 5  # launched with its workload's validated policy
    assert svc.get_job(other.job.id).job.phase == Phase.KNOWN


def test_nothing_brings_an_ended_jobs_state_back(tmp_path: Path) -> None:
    """Review of the loop's move (2026-12-03): a live trial finishing after its job ended, a
    window-free policy tick, or `explain` on the ended job each re-created its state for good (a
    daemon that runs for months). A job gitmd holds no state of reads as a blank one, never kept;
    and a job registered before this gitmd started keeps the phase it had."""
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("e", ("prog",), "/", os.getuid(), os.getgid()))
    job_id = view.job.id
    svc.states.of(job_id).experiment = threading.Event()  # a live trial running
    svc.report_exit(job_id, 0)
    assert svc.states.get(job_id) is None
    st = svc.states.of(job_id)  # what the trial's end, a tick or explain read
    st.experiment = None
    svc.loop.known.apply(job_id, window_free=True)
    svc.loop.choose.launch(job_id)
    svc.loop.observe.end_if_done(job_id)
    assert svc.states.get(job_id) is None
    # a job of an earlier gitmd (no state here): its stored phase is not overwritten by a view
    other, _ = svc.register_job(Registration("o", ("prog",), "/", os.getuid(), os.getgid()))
    svc.jobs.set_phase(other.job.id, "trial run")
    svc.states.drop(other.job.id)
    assert svc.get_job(other.job.id).job.phase == "trial run"
