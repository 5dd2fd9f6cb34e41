"""A job's end (gitmd/loop/exits.py): its exit reported or reaped, its run by its own clock, a crash
told apart, what gitmd held of it kept in the store and dropped from memory."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from gitmd.jobs.registry import Registration
from gitmd.loop.exits import EXPIRE_UNSTARTED_S, REAP_AFTER_S
from tests.unit.loop.helpers import live_ring, make_service, service_with_policy


def test_reaper_ends_jobs_nobody_reported(tmp_path: Path, shim_tools: Path) -> None:
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("dead", ("prog",), "/", os.getuid(), os.getgid()))
    job_dir = Path(plan.env["GITM_JOB_DIR"])
    # a real ring, written by a process that has already exited
    subprocess.run(
        [str(shim_tools / "ring_writer"), str(job_dir), "10", "64"], check=True, capture_output=True
    )
    assert [alive for _, alive in svc.get_job(view.job.id).processes] == [False]
    t0 = svc.get_job(view.job.id).job.created_ns
    assert svc.reap(t0) == []  # first seen dead now: not yet
    assert svc.reap(t0 + int((REAP_AFTER_S - 1) * 1e9)) == []
    assert svc.reap(t0 + int((REAP_AFTER_S + 1) * 1e9)) == [view.job.id]
    job = svc.get_job(view.job.id).job
    assert job.state == "lost" and not job_dir.exists()
    assert [v.job.id for v in svc.list_jobs(include_exited=False)] == []


def test_reaper_expires_jobs_that_never_started(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("never", ("prog",), "/", os.getuid(), os.getgid()))
    t0 = view.job.created_ns
    assert svc.reap(t0 + int(10 * 1e9)) == []
    assert svc.reap(t0 + int((EXPIRE_UNSTARTED_S + 1) * 1e9)) == [view.job.id]


def test_a_job_without_the_shim_lives_as_long_as_its_launcher(tmp_path: Path) -> None:
    """A run without the shim (--no-capture, or one the observation backoff leaves resting) has no
    ring to show it alive: it is not expired while its launcher (the registering process, its pid
    with its start time) runs, and is lost once that has ended without reporting."""
    svc = make_service(tmp_path)
    launcher = subprocess.Popen(["sleep", "60"])
    try:
        reg = Registration("long", ("prog",), "/", os.getuid(), os.getgid(), capture=False)
        view, plan = svc.register_job(dataclasses.replace(reg, launcher_pid=launcher.pid))
        assert not plan.capture
        later = view.job.created_ns + int((EXPIRE_UNSTARTED_S + 3600) * 1e9)
        assert view.job.launcher[0] == launcher.pid  # stored with the job: a restart keeps it
        assert svc.reap(later) == []  # hours on: its launcher still waits for it
        launcher.kill()
        launcher.wait()
        assert svc.reap(later) == []  # its report may be on its way: a grace first
        assert svc.reap(later + int((REAP_AFTER_S + 1) * 1e9)) == [view.job.id]
        assert svc.get_job(view.job.id).job.state == "lost"
        # a job without the shim whose launcher is not known expires as before (an hour unstarted)
        anon, _ = svc.register_job(reg)
        assert anon.job.launcher == (0, 0)
        assert svc.reap(anon.job.created_ns + int((EXPIRE_UNSTARTED_S + 1) * 1e9)) == [anon.job.id]
    finally:
        launcher.kill()
        launcher.wait()


def test_a_live_job_is_never_reaped(tmp_path: Path, write_ring: Callable[..., Path]) -> None:
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("live", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    assert [alive for _, alive in svc.get_job(view.job.id).processes] == [True]
    assert svc.reap(view.job.created_ns + int(10_000 * 1e9)) == []


def test_a_jobs_window_count_is_kept_after_it_exits(tmp_path: Path, write_ring: Callable[..., Path]) -> None:
    """`gitmctl job` after the job ended said 0 windows (its capture is untracked at exit and the
    count went with it): the H200 window-cycling test read 0 for jobs that had 6 and 12."""
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("w", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    assert svc.get_job(view.job.id).windows == 0
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    jc.windows = 7  # what seven duty windows counted
    assert svc.get_job(view.job.id).windows == 7
    ended = svc.report_exit(view.job.id, 0)
    assert svc.capture.get(view.job.id) is None  # type: ignore[union-attr]
    assert ended.windows == 7
    assert svc.get_job(view.job.id).windows == 7


def test_an_ended_jobs_outcome_is_kept_in_the_store_not_in_memory(tmp_path: Path) -> None:
    """A daemon that runs for months keeps only its running jobs in memory: once a job has ended, its
    windows, policy and steps are in its row, its in-memory state is gone, and its view (this
    gitmd's, or the next one's after a restart) still says what its run came to."""
    from gitmd.analysis.steps import JobSteps, StepStats

    svc = service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(reg)
    job_id = view.job.id
    assert plan.policy_id
    steps = JobSteps(4242, 7, StepStats(True, "", 12, 40, 2.5e6, 2.4e6, 2.7e6, 0.97, 0.95, 3), "sgemm")
    st = svc.states.of(job_id)
    st.steps = steps
    jc = svc.capture.get(job_id) if svc.capture is not None else None
    assert jc is not None
    jc.windows = 7  # windows it had while tracked
    st.tried.add("sched_priority")
    st.fingerprinted = True
    done = svc.report_exit(job_id, 0)
    assert (done.windows, done.steps, done.policy_id) == (7, steps, plan.policy_id)
    # its steps, windows, policy, fingerprint and the levers tried on it: all gone with its JobState
    assert svc.states.get(job_id) is None
    again = svc.report_exit(job_id, 0)  # reported twice (a launcher, then the scheduler): kept
    assert (again.windows, again.steps, again.policy_id) == (7, steps, plan.policy_id)
    later = make_service(tmp_path)  # the next gitmd, on the same store
    seen = later.get_job(job_id)
    assert (seen.windows, seen.steps, seen.policy_id, seen.job.state) == (7, steps, plan.policy_id, "exited")


def test_a_run_that_crashes_under_gitmd_is_marked_and_its_program_runs_plainly_until_clean(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A job that died of SIGSEGV with the shim loaded may have been killed by gitmd (H200,
    2026-12-03: a third-party language model, exit -11, in a trial's run): the crash is recorded
    with what was in force, its program's next launch gets no shim and no trial, and once a launch
    without gitmd's capture ends cleanly, capture resumes."""
    svc = make_service(tmp_path)
    reg = Registration("lm", ("python", "lm.py"), "/srv", os.getuid(), os.getgid(), launch_key="lm")
    view, plan = svc.register_job(reg)
    assert plan.capture
    live_ring(plan.env["GITM_JOB_DIR"], write_ring, age_s=14.0)
    svc.get_job(view.job.id)
    ended = svc.report_exit(view.job.id, -11)
    assert ended.job.crash.startswith("may be gitmd's: died of SIGSEGV") and "shim" in ended.job.crash
    assert ended.job.run_s is not None and ended.job.run_s >= 14.0  # from its ring's CUDA start
    again, plan2 = svc.register_job(reg)
    assert not plan2.capture and "CUDA_INJECTION64_PATH" not in plan2.env
    assert any("crashed under it" in w and view.job.id in w for w in plan2.warnings)
    assert svc.report_exit(again.job.id, -11).job.crash == ""  # nothing of gitmd's was in force
    still, plan3 = svc.register_job(reg)
    assert not plan3.capture  # it has not run clean yet
    svc.report_exit(still.job.id, 0)
    _, plan4 = svc.register_job(reg)
    assert plan4.capture  # a clean plain run: capture resumes


def test_stopping_a_job_on_purpose_is_no_crash(tmp_path: Path) -> None:
    from gitmd.store.crashes import crash_signal

    assert crash_signal(-15) == 0 and crash_signal(-9) == 0 and crash_signal(130) == 0
    assert crash_signal(-11) == 11 and crash_signal(139) == 11 and crash_signal(134) == 6
    assert crash_signal(0) == 0 and crash_signal(1) == 0 and crash_signal(None) == 0
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("x", ("prog",), "/", os.getuid(), os.getgid()))
    assert svc.report_exit(view.job.id, -15).job.crash == ""


def test_an_ended_jobs_last_window_is_explained_from_the_store(tmp_path: Path) -> None:
    """Issue: `gitmctl explain <ended job>` said "not captured: nothing to explain" for every job. A
    job's last window is analysed when it ends if no report was made while it ran (a known job's
    never is), and kept; explain reads it after the job is gone from memory."""
    import dataclasses

    from gitmd.capture import capture_file
    from tests.unit.loop.helpers import PLANTED

    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("e", ("prog",), "/", os.getuid(), os.getgid()))
    job_id = view.job.id
    window = capture_file.loads(next(iter(sorted(PLANTED.glob("*.npz")))))
    svc.states.of(job_id).newest = dataclasses.replace(window, job_id=job_id)
    # its run's window budget ended its observation early: still said after the run
    svc.states.of(job_id).observation_note = "its window budget is spent: ..."
    svc.report_exit(job_id, 0)
    assert svc.states.get(job_id) is None  # nothing of it left in memory
    rep = svc.attribution(job_id)
    assert rep.window_id == window.window_id and rep.notes[0].startswith("the job has ended (exited, exit 0)")
    assert [c.name for c in rep.causes]
    assert "its observation ended: its window budget is spent" in " ".join(rep.notes), rep.notes


def test_a_job_whose_exit_came_while_the_reaper_looked_is_not_lost(tmp_path: Path) -> None:
    """Review 2026-12-03: the reaper read the job list, the launcher's exit report came, and the job
    (over an hour old, untracked by then) was marked lost over its clean exit."""
    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("r", ("prog",), "/", os.getuid(), os.getgid()))
    stale = svc.jobs.get(view.job.id)  # as the reaper listed it
    svc.report_exit(view.job.id, 0)
    listed = svc.jobs.list
    svc.jobs.list = lambda include_exited=False, scheduler_job_id="": [stale]  # type: ignore[method-assign]
    try:
        assert svc.reap(view.job.created_ns + int((EXPIRE_UNSTARTED_S + 1) * 1e9)) == []
    finally:
        svc.jobs.list = listed  # type: ignore[method-assign]
    job = svc.jobs.get(view.job.id)
    assert job.state == "exited" and job.exit_code == 0


def test_a_run_gitmd_let_go_without_the_shim_never_clears_a_crash_mark_even_after_a_restart(
    tmp_path: Path,
) -> None:
    """A clean run without capture clears its program's crash mark (capture resumes): that is the
    proof its crash was its own. A run the backoff (or a launch trial) sent without the shim proves
    nothing of the kind, also when gitmd restarted meanwhile and holds no state of it: its row says
    how it was registered."""
    import json as _json

    from gitmd.jobs.registry import Registration
    from tests.unit.loop.helpers import make_service

    svc = make_service(tmp_path)
    reg = Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid(), launcher_pid=os.getpid())
    for _ in range(2):  # two observed runs: the next one rests, without the shim
        v, _ = svc.register_job(reg)
        svc.jobs.exited(v.job.id, 0, windows=2, cost=_json.dumps({"share": 0.0}))
    v, plan = svc.register_job(reg)
    assert svc.states.of(v.job.id).resting and not plan.capture
    job = svc.jobs.get(v.job.id)
    svc.crashes.mark(job.workload_id, job.launch_key, "earlier", "may be gitmd's: died of SIGSEGV")
    svc.states.drop(v.job.id)  # gitmd restarted: nothing held of the run
    svc.report_exit(v.job.id, 0)
    assert svc.crashes.find(job.workload_id, job.launch_key) is not None


def test_the_exit_report_is_answered_before_the_last_window_is_analysed(tmp_path: Path) -> None:
    """The launcher waits for the exit report's answer before it exits with the job's status, and
    after runs with windows that answer came up to 0.12 s later than after runs without (H100
    2026-12-07); the last window's analysis was the work the report did only for such runs. The
    report is answered first; the analysis follows and is stored, and a reader of the ended job
    waits for it (the test above: explain still has it)."""
    import dataclasses
    import threading

    from gitmd.capture import capture_file
    from gitmd.loop import attribute
    from tests.unit.loop.helpers import PLANTED

    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("e", ("prog",), "/", os.getuid(), os.getgid()))
    job_id = view.job.id
    window = capture_file.loads(next(iter(sorted(PLANTED.glob("*.npz")))))
    svc.states.of(job_id).newest = dataclasses.replace(window, job_id=job_id)
    go = threading.Event()
    real = attribute.window_report

    def held(*a: object, **kw: object) -> object:
        assert go.wait(30)  # the analysis cannot finish until the exit report has been answered
        return real(*a, **kw)  # type: ignore[arg-type]

    attribute.window_report = held  # type: ignore[assignment]
    try:
        ended = svc.report_exit(job_id, 0)  # returns while the analysis is held
        assert ended.job.state == "exited" and svc.loop.d.reports.get(job_id) is None
        go.set()
        rep = svc.attribution(job_id)  # waits for the late report
    finally:
        attribute.window_report = real  # type: ignore[assignment]
    assert rep.window_id == window.window_id and [c.name for c in rep.causes]
