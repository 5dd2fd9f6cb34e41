"""Observe (gitmd/loop/observe.py, and the duty tick of gitmd/loop/__init__.py): when a job's
capture windows come, how long each lasts, when they stop, and what is kept of them."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitmd.capture import capture_file, duty
from gitmd.config import ExperimentsConfig
from gitmd.errors import InvalidArgumentError
from gitmd.jobs.launch import SHIM_ENV, LaunchPlan
from gitmd.jobs.registry import Registration
from gitmd.loop.observe import LATE_SHARE
from gitmd.loop.state import LivePending
from tests.unit.loop.helpers import MAPPINGS, PLANTED, live_ring, make_service, recurring, set_config


def ring_launcher(svc: Any, tmp_path: Path, write_ring: Callable[..., Path]) -> Callable[[str, float], str]:
    """launch(name, age_s): a job of program ``name`` registered, with a ring naming this living
    process as ``age_s`` old (mapped by it, as the shim maps it); its job id."""
    template = tmp_path / "template"
    template.mkdir()
    live_ring(str(template), write_ring)  # a ring naming this living process

    def launch(name: str, age_s: float) -> str:
        v, plan = svc.register_job(Registration(name, (name,), "/", os.getuid(), os.getgid()))
        data = bytearray((template / "ring-1-1.gitm").read_bytes())
        data[56:64] = (time.time_ns() - int(age_s * 1e9)).to_bytes(8, "little")  # created_real_ns
        path = Path(plan.env["GITM_JOB_DIR"]) / "ring-1-1.gitm"
        path.write_bytes(bytes(data))
        with open(path, "r+b") as f:  # mapped by the process it names, as the shim maps it
            MAPPINGS.append(mmap.mmap(f.fileno(), 0))
        return str(v.job.id)

    return launch


def test_the_duty_cycle_waits_for_a_jobs_stretched_period(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A launch-bound job's period is stretched to hold the overhead budget; the duty tick must not
    open its window early (it did: the period was computed and never checked), and a job under
    experiment gets no duty windows at all."""
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("live", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring, age_s=60)  # past start-up: its window is due
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc.duty_cycle()
    assert submitted == [view.job.id]
    # a tick while its window is taken or analysed (before schedule_next sets the next due time)
    # opens no second window: the H200's runs could get two first windows that way
    svc.duty_cycle()
    assert submitted == [view.job.id]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    jc.next_due_mono = time.monotonic() + 60  # stretched: not due for a minute
    svc.duty_cycle()
    assert submitted == [view.job.id]
    jc.next_due_mono = 0.0
    st = svc.states.of(view.job.id)
    st.experiment = threading.Event()
    svc.duty_cycle()
    assert submitted == [view.job.id]
    st.experiment = None
    svc.duty_cycle()
    assert submitted == [view.job.id, view.job.id]


def test_a_known_long_jobs_first_window_waits_until_its_processes_have_settled(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """Until a process is 10 s old the shim closes a window without detaching CUPTI (detaching then
    crashed jobs on the H200), so a start-up window costs a launch-bound job ~40% until then: a
    recurring job whose earlier runs all lasted at least twice capture.settle_s gets no duty window
    before its processes are settle_s old, nor does a first run (taken as long until it has shown
    otherwise). A job one of whose runs was short waits only for its observation to be placed late
    in its expected run; a launch trial's run and a job with a live policy
    whose lever needs a window get theirs at once; a job that got its workload's policy and is not
    explored waits, whatever its runs' length. A program whose runs are long waits longer: its
    observation is placed late in its expected run (what a window leaves behind is paid until the end)."""
    svc = make_service(tmp_path)
    settle = svc.config.capture.settle_s
    assert settle > 0

    def earlier_run(name: str, seconds: float, cuda_s: float | None = None) -> None:
        """A run of ``name`` that lasted ``seconds`` from its registration, ``cuda_s`` of them
        (default: all) from its CUDA start (the shim's clock, run_s)."""
        v, _ = svc.register_job(Registration(name, (name,), "/", os.getuid(), os.getgid()))
        svc.jobs.exited(v.job.id, 0, run_s=seconds if cuda_s is None else cuda_s)
        with svc.jobs.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET created_ns = ended_ns - ? WHERE id = ?", [int(seconds * 1e9), v.job.id]
            )

    launch = ring_launcher(svc, tmp_path, write_ring)

    for _ in range(2):
        earlier_run("long", 3 * settle)
    earlier_run("short", 3 * settle)
    earlier_run("short", settle)  # one of its runs was short: it may be again
    # long from its registration (the interpreter's start, imports), short under CUDA, where a
    # process's age is counted: timm's ResNet-50 waited 10 s in every run and never got a window
    earlier_run("slow-start", 3 * settle, cuda_s=settle)
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc.loop.windows_per_user = 100  # the windows submitted here never run (and never give back their place)
    # "long"'s runs lasted 3 * settle: its observation stretch is placed to end by LATE_SHARE of
    # that, later than settle; no observed run of it is known, so the stretch is what its window
    # budget pays for with a window priced at all its time (a short first window, then budget * 3 *
    # settle s of windows, a tick)
    c = svc.config.capture
    stretch = c.first_window_s + duty.TICK_S  # priced at all its time, the budget pays for no more
    late = LATE_SHARE * 3 * settle - stretch
    assert late > settle
    young = launch("long", 1.0)
    first = launch("first", 1.0)
    short = launch("short", 1.0)
    slow_start = launch("slow-start", 1.0)
    settled = launch("long", late + 1.0)
    assert svc.states.of(young).settle_age_s == pytest.approx(late)
    assert svc.states.of(first).settle_age_s == settle  # a first run: settle_s
    # a run that is to continue a live trial an earlier run of its workload ended keeps settle_s
    exps = svc.loop.observe.d.experiments
    resuming = dataclasses.replace(svc.jobs.get(young), workload_id="w-long")
    real = exps.workload_trials
    exps.workload_trials = lambda w: {"cpu_affinity": ("resumable", 1)} if w == "w-long" else {}  # type: ignore[method-assign]
    try:
        assert svc.loop.observe.first_window_age_s(resuming) == settle
        assert svc.loop.observe.first_window_age_s(svc.jobs.get(young)) == pytest.approx(late)
    finally:
        exps.workload_trials = real  # type: ignore[method-assign]
    svc.duty_cycle()
    # a program whose runs were short (10 s under CUDA) no longer gets its window at start-up: its
    # observation is placed late in its expected run too (never before settle_s only for long ones)
    for j in (short, slow_start):
        assert svc.states.of(j).settling
        assert svc.states.of(j).settle_age_s == pytest.approx(LATE_SHARE * settle - stretch)
    assert sorted(submitted) == [settled]
    assert (
        svc.states.of(young).settling
        and svc.states.of(first).settling
        and not svc.states.of(settled).settling
    )
    # its processes settle: the first window comes
    ring = Path(svc.get_job(young).job.runtime_dir) / "ring-1-1.gitm"
    data = bytearray(ring.read_bytes())
    data[56:64] = (time.time_ns() - int((settle + 0.5) * 1e9)).to_bytes(8, "little")
    ring.write_bytes(bytes(data))
    submitted.clear()
    svc.duty_cycle()
    assert young not in submitted  # settle_s old, not yet late enough in its expected run
    data[56:64] = (time.time_ns() - int((late + 0.5) * 1e9)).to_bytes(8, "little")
    ring.write_bytes(bytes(data))
    submitted.clear()
    for j in (short, slow_start, settled):
        svc.capture.get(j).next_due_mono = time.monotonic() + 60  # type: ignore[union-attr]
    svc.duty_cycle()
    assert submitted == [young] and not svc.states.of(young).settling and svc.states.of(first).settling
    # a launch trial's run and a job with a live policy pending keep the early window
    job = svc.jobs.get(young)
    settles = svc.loop.observe.settles
    assert settles(job, LaunchPlan({}, ()))
    assert not settles(job, LaunchPlan({}, (), trial="launch trial 1: arm A"))
    svc.states.of(job.id).live = LivePending(1, [{"lever": "stream_priority", "setting": {}}], 0)
    assert not settles(job, LaunchPlan({}, ()))  # a window finds the stream to raise
    svc.states.of(job.id).live = LivePending(1, [{"lever": "cpu_affinity", "setting": {}}], 0)
    assert settles(job, LaunchPlan({}, ()))  # applied from the tick, as its processes show
    svc.states.of(job.id).live = None
    brief = svc.jobs.get(short)
    assert "placed late in its expected run" in settles(brief, LaunchPlan({}, ()))
    svc.states.of(brief.id).policy_id = 7  # it got its workload's policy: known, not explored
    assert "policy" in settles(brief, LaunchPlan({}, ()))
    svc.states.of(brief.id).policy_id = 0


def test_a_recurring_program_is_observed_on_fewer_and_fewer_runs(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A short timm training on the H200 (2026-12-04) lost 15% of every run to its windows (CUPTI
    attached from the first on) while nothing was left to learn on it. After capture.observe_runs
    observed runs, a run of the same program is observed only once the backoff says so (runs 1, 2,
    4, 8, 16, ... at most every capture.reobserve_every): the others get no window at all, and
    explain says why. Observed regardless: a run whose workload has a live trial to continue, or a
    live policy whose lever acts through a window."""
    svc = make_service(tmp_path)
    assert svc.config.capture.observe_runs == 2 and svc.config.capture.reobserve_every == 32
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc.loop.windows_per_user = 1000
    template = tmp_path / "template"
    template.mkdir()
    live_ring(str(template), write_ring, age_s=60)  # a ring naming this living process, settled

    def run() -> tuple[str, bool]:
        """A run of the program, its duty tick, its end; whether it was observed (got a window)."""
        reg = Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid(), launcher_pid=os.getpid())
        v, plan = svc.register_job(reg)
        if svc.states.of(v.job.id).resting:
            # no window will open: it goes without the shim, so CUPTI is not even loaded into it
            # (loaded with every activity off it cost a launch-bound program 16-44%, H200)
            assert "runs without the shim" in svc.states.of(v.job.id).resting
            assert not plan.capture and not set(SHIM_ENV) & set(plan.env) and plan.env["GITM_JOB_ID"]
            stored = svc.jobs.get(v.job.id)
            assert not stored.capture and stored.runtime_dir == ""
            # explain says why there is nothing to explain on this run (it said "not captured")
            with pytest.raises(InvalidArgumentError, match=r"runs without gitmd.s capture .*observed on"):
                svc.attribution(v.job.id)
        else:
            assert plan.capture
            path = Path(plan.env["GITM_JOB_DIR"]) / "ring-1-1.gitm"
            path.write_bytes((template / "ring-1-1.gitm").read_bytes())
            with open(path, "r+b") as f:  # mapped by the process it names, as the shim maps it
                MAPPINGS.append(mmap.mmap(f.fileno(), 0))
        submitted.clear()
        svc.duty_cycle()
        observed = submitted == [v.job.id]
        assert observed != bool(svc.states.of(v.job.id).resting)
        if observed:
            with svc.jobs.store.transaction() as db:  # as its windows would have been counted
                db.execute("UPDATE jobs SET windows = 2 WHERE id = ?", [v.job.id])
        svc.report_exit(v.job.id, 0)
        if observed:
            with svc.jobs.store.transaction() as db:
                db.execute("UPDATE jobs SET windows = 2 WHERE id = ?", [v.job.id])
        return v.job.id, observed

    seen = [run()[1] for _ in range(20)]
    assert [i + 1 for i, o in enumerate(seen) if o] == [1, 2, 4, 8, 16]
    # a resting run's phase is kept all the same, and what it cost it is 0 on its launcher's clock
    rested = [j for j in svc.jobs.list(include_exited=True) if not j.capture]
    assert len(rested) == 15 and all(j.phase == "observed" for j in rested)
    # a resting run keeps the shim when no launcher is known to show it alive (no ring would), when
    # it yields to foreground jobs (their co-tenant yield acts through its shim), or when the
    # operator says so (capture.shim_on_resting_runs)
    base = Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid(), launcher_pid=os.getpid())
    keep = dataclasses.replace(svc.config.capture, shim_on_resting_runs=True)
    for reg, cfg in (
        (dataclasses.replace(base, launcher_pid=0), svc.config.capture),
        (dataclasses.replace(base, background=True), svc.config.capture),
        (base, keep),
    ):
        before = svc.config.capture
        set_config(svc, dataclasses.replace(svc.config, capture=cfg))
        v, plan = svc.register_job(reg)
        assert svc.states.of(v.job.id).resting and plan.capture and "CUDA_INJECTION64_PATH" in plan.env
        svc.report_exit(v.job.id, 0)
        set_config(svc, dataclasses.replace(svc.config, capture=before))
    set_config(
        svc, dataclasses.replace(svc.config, capture=dataclasses.replace(keep, shim_on_resting_runs=False))
    )
    # the next run (21st: not due) says why it has no window (explain shows it as a note)
    v, _ = svc.register_job(Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid()))
    st = svc.states.of(v.job.id)
    assert "observed on 5 earlier runs" in st.resting and st.observed
    job = svc.jobs.get(v.job.id)
    rests = svc.loop.observe.rests
    # a live policy whose lever needs a window (it finds the stream to raise): observed
    st.live = LivePending(1, [{"lever": "stream_priority", "setting": {}}], 0)
    assert rests(job, LaunchPlan({}, ())) == ""
    st.live = LivePending(1, [{"lever": "cpu_affinity", "setting": {}}], 0)
    assert rests(job, LaunchPlan({}, ()))  # window-free: applied as its processes show
    st.live = None
    # its workload has a live trial its last run ended before deciding: this run continues it (the
    # program's runs are the workload's: a sure launch counts the workload's observed runs)
    for earlier in svc.jobs.list(include_exited=True):
        svc.jobs.set_workload(earlier.id, "w1")
    job = svc.jobs.get(job.id)
    just_before = job.created_ns - 1
    svc.experiments.workload_trials = lambda wid: {"cpu_affinity": ("resumable", just_before)}  # type: ignore[method-assign]
    assert rests(job, LaunchPlan({}, ())) == ""
    # ... unless its last two runs each ended before a pair of their own (runs too short for it)
    svc.experiments.stalled = lambda wid, lever: True  # type: ignore[method-assign]
    assert rests(job, LaunchPlan({}, ()))
    svc.experiments.stalled = lambda wid, lever: False  # type: ignore[method-assign]
    # ... or two observed runs since did not continue it (its cause gone): the backoff decides
    svc.experiments.workload_trials = lambda wid: {"cpu_affinity": ("resumable", 0)}  # type: ignore[method-assign]
    assert rests(job, LaunchPlan({}, ()))
    svc.experiments.workload_trials = lambda wid: {"cpu_affinity": ("reverted", just_before)}  # type: ignore[method-assign]
    assert rests(job, LaunchPlan({}, ()))
    # ... or when the run got its workload's policy and is not explored
    svc.experiments.workload_trials = lambda wid: {"cpu_affinity": ("resumable", just_before)}  # type: ignore[method-assign]
    st.policy_id = 7
    assert rests(job, LaunchPlan({}, ()))
    st.policy_id = 0
    # consent given since its last observed run: the next run is observed (a lever may now be tried)
    from gitmd.experiments.equivalence import Check, Contract

    svc.experiments.workload_trials = lambda wid: {}  # type: ignore[method-assign]
    svc.report_exit(v.job.id, 0)
    wid = recurring(svc, "t.py")  # a workload in the library to give consent on
    for earlier in svc.jobs.list(include_exited=True):
        svc.jobs.set_workload(earlier.id, wid)
    job = svc.jobs.get(v.job.id)
    assert rests(job, LaunchPlan({}, ()))
    svc.set_workload_contract(wid, os.getuid(), Contract((Check("stdout_metric", regex=r"l=(\S+)"),)))
    assert rests(job, LaunchPlan({}, ())) == ""
    # off: every run observed
    every = dataclasses.replace(svc.config.capture, reobserve_every=0)
    set_config(svc, dataclasses.replace(svc.config, capture=every))
    assert rests(job, LaunchPlan({}, ())) == ""


def test_the_backoff_counts_a_programs_whole_history(tmp_path: Path) -> None:
    """A review found the observed runs counted over the latest 256 runs only, so with
    reobserve_every above ~32 the doubling started over as old observations dropped out. The count
    is over the whole history: with reobserve_every 64, runs 1, 2, 4, ..., 128 are observed, then
    one in 64."""
    svc = make_service(tmp_path)
    every = dataclasses.replace(svc.config.capture, reobserve_every=64)
    set_config(svc, dataclasses.replace(svc.config, capture=every))
    seen = []
    for _ in range(330):
        v, _ = svc.register_job(Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid()))
        resting = bool(svc.states.of(v.job.id).resting)
        seen.append(not resting)
        svc.report_exit(v.job.id, 0)
        if not resting:
            with svc.jobs.store.transaction() as db:
                db.execute("UPDATE jobs SET windows = 1 WHERE id = ?", [v.job.id])
    assert [i + 1 for i, o in enumerate(seen) if o] == [1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320]


@pytest.mark.parametrize(
    ("fixture", "full_at_once"),
    [("bf16-n8192.w2.npz", True), ("launch-1k.w2.npz", False)],
    ids=["quiet", "launch-bound"],
)
def test_a_jobs_first_duty_window_is_short_then_full_when_the_budget_allows(
    tmp_path: Path, write_ring: Callable[..., Path], fixture: str, full_at_once: bool
) -> None:
    """Real H200 windows stand for what the job does: the first duty window lasts first_window_s, and
    the full one follows at once — a job launching few kernels (bf16 GEMMs, ~110/s) and a launch-bound
    one (~70k launches/s) alike, the first window capped at what the budget allows over a period, the
    next, once the first has found the step, at what duty.WINDOW_STEPS steps need."""
    svc = make_service(tmp_path)
    set_config(svc, dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False)))
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)  # its ring seen: the job is tracked
    seen = capture_file.loads(PLANTED / fixture)
    asked: list[float] = []
    caps: list[int | None] = []

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        asked.append(duration_s)
        caps.append(max_records)
        return dataclasses.replace(seen, job_id=job_id, window_id=len(asked))

    submitted: list[str] = []
    svc.capture.capture = capture  # type: ignore[union-attr,method-assign]
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    c = svc.config.capture
    svc.loop.run_window(view.job.id)
    assert asked == [c.first_window_s]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    if full_at_once:  # and the process's observation under way: its windows come close together
        assert submitted == [view.job.id] and jc.period_s == duty.TICK_S
        svc.loop.run_window(view.job.id)  # the full window, from the pool
        assert asked == [c.first_window_s, c.window_duration_s] and submitted == [view.job.id]
        # capped at what the budget allows over the period: 0.01 x 30 s / 6 us = 50k launches, then
        # at WINDOW_STEPS steps of the step the first window found
        assert caps == [50_000, step_cap(seen)]
    else:  # its observation comes a tick apart all the same (CUPTI stays attached in between), each
        # window capped by the budget: 50k launches, ~0.7 s of this job's ~70k/s
        assert submitted == [view.job.id] and jc.period_s == duty.TICK_S
        svc.loop.run_window(view.job.id)
        assert asked == [c.first_window_s, c.window_duration_s] and caps == [50_000, step_cap(seen)]


def step_cap(w: Any) -> int:
    """What duty.WINDOW_STEPS steps of the job in window ``w`` need (Observe.step_records)."""
    from gitmd.analysis.steps import job_steps

    steps = job_steps(w)
    assert steps is not None and steps.stats.found
    main = next(p for p in w.processes if p.pid == steps.pid)
    records = sum(
        p.records.count + len(p.records.clocks) + len(p.records.windows) + len(p.records.payloads)
        + len(p.records.hostsrcs) for p in w.processes
    )  # fmt: skip
    cap = duty.step_records(steps.stats.period_kernels, records, len(main.records.kernels))
    assert cap is not None and duty.WINDOW_STEPS * steps.stats.period_kernels < cap < 50_000
    return cap


def test_a_process_is_observed_in_one_stretch_then_its_cupti_detached_once(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """Attaching CUPTI again after a detach crashed jobs (H200, CUDA 13.0), so a process's windows come
    in one stretch at the start-up pace — CUPTI attached, its activity off, in between — and once
    capture.session_windows windows are analysed and nothing gitmd runs needs another, its shim is told
    to detach (GITM_KNOB_DETACH, once) and the duty cycle gives it no window again. A real H200 window
    stands for the job."""
    svc = make_service(tmp_path)
    set_config(svc, dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False)))
    c = svc.config.capture
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)
    seen = capture_file.loads(PLANTED / "bf16-n8192.w2.npz")
    assert svc.capture is not None
    jc = svc.capture.get(view.job.id)
    assert jc is not None

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        jc.windows += 1  # as the real one counts an analysed window
        return dataclasses.replace(seen, job_id=job_id, window_id=jc.windows)

    ended: list[str] = []

    def end_observation(job_id: str, timeout_s: float = 2.0) -> dict[int, str]:
        ended.append(job_id)
        for pc in jc.procs.values():
            pc.observed = True
        return {4242: "detached"}

    svc.capture.capture = capture  # type: ignore[method-assign]
    svc.capture.end_observation = end_observation  # type: ignore[method-assign]
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    for _ in range(1, c.session_windows):
        svc.loop.run_window(view.job.id)
        assert ended == [] and jc.period_s == duty.TICK_S  # the stretch goes on, windows a tick apart
    svc.loop.run_window(view.job.id)  # the last one the observation needs
    assert ended == [view.job.id] and jc.windows == c.session_windows
    assert not svc.capture.observable(view.job.id)
    assert svc.jobs.get(view.job.id).phase == "observed"  # written when it happened, not at a view
    submitted.clear()
    jc.next_due_mono = 0.0
    svc.duty_cycle()  # due, but its process's observation has ended: no window
    assert submitted == []


def test_until_a_window_finds_the_jobs_step_its_windows_come_at_the_startup_pace(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A 15-s job (fp32_mlp, H200 2026-12-03) had its windows in start-up and none after: until a
    window finds the step, the next comes a tick later, at most STARTUP_WINDOWS times; then the
    observation's capture.session_windows windows with kernels come a tick apart too (start-up
    windows and windows without kernels do not count: H200 2026-12-03, sync_spin), and the
    configured period after them. Real H200 windows."""
    svc = make_service(tmp_path)
    set_config(svc, dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False)))
    c = svc.config.capture
    assert 0 < duty.TICK_S < c.window_every_s
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)
    steady = capture_file.loads(PLANTED / "bf16-n8192.w2.npz")
    startup = dataclasses.replace(steady, processes=())  # CUDA up, no kernels yet
    shown = [startup]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        jc.windows += 1  # as the real one counts an analysed window
        return dataclasses.replace(shown[0], job_id=job_id)

    svc.capture.capture = capture  # type: ignore[union-attr,method-assign]
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc.loop.run_window(view.job.id)  # the short first window: start-up
    assert jc.period_s == duty.TICK_S and submitted == [view.job.id]  # the full one at once
    for _ in range(c.session_windows):  # full windows: still start-up, however many
        svc.loop.run_window(view.job.id)
        assert jc.period_s == duty.TICK_S and submitted == [view.job.id]
    shown[0] = steady
    for _ in range(c.session_windows - 1):  # the step found: the observation's windows with kernels
        svc.loop.run_window(view.job.id)
        assert jc.period_s == duty.TICK_S
    svc.loop.run_window(view.job.id)  # the last of them: the configured period from now on
    assert jc.period_s == c.window_every_s
    # a job that never shows a step: the start-up pace for STARTUP_WINDOWS windows only
    other, other_plan = svc.register_job(Registration("idle", ("prog",), "/", os.getuid(), os.getgid()))
    ring = Path(plan.env["GITM_JOB_DIR"]) / "ring-1-1.gitm"
    (Path(other_plan.env["GITM_JOB_DIR"]) / ring.name).write_bytes(ring.read_bytes())
    svc.get_job(other.job.id)
    jo = svc.capture.get(other.job.id)  # type: ignore[union-attr]
    assert jo is not None
    shown[0] = startup
    svc.loop.run_window(other.job.id)
    assert jo.period_s == duty.TICK_S
    jo.windows = duty.STARTUP_WINDOWS  # settled by count: still no kernel, still the start-up pace
    svc.loop.run_window(other.job.id)
    assert jo.period_s == duty.TICK_S
    jo.windows = duty.STARTUP_WINDOWS + c.session_windows  # ... until that many windows more
    svc.loop.run_window(other.job.id)
    assert jo.period_s == c.window_every_s
    # a launch trial's run: no window at all — it is measured by its own clock, CUPTI never attached
    run, run_plan = svc.register_job(Registration("trial", ("prog",), "/", os.getuid(), os.getgid()))
    (Path(run_plan.env["GITM_JOB_DIR"]) / ring.name).write_bytes(ring.read_bytes())
    svc.get_job(run.job.id)
    jr = svc.capture.get(run.job.id)  # type: ignore[union-attr]
    assert jr is not None
    svc.states.of(run.job.id).trial_id = 1
    submitted.clear()
    jr.next_due_mono = 0.0
    svc.duty_cycle()
    assert run.job.id not in submitted and jr.windows == 0


def test_kept_windows_are_the_newest_of_each_job_and_never_break_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """capture.keep_windows: each analysed window written under <state_dir>/windows/<job>/ in the
    raw trace format (a real H200 window here), root-only, the job's oldest beyond the limit removed;
    a state directory that cannot be written is logged and the window is analysed all the same."""
    svc = make_service(tmp_path)
    state = tmp_path / "lib"
    set_config(
        svc,
        dataclasses.replace(
            svc.config,
            daemon=dataclasses.replace(svc.config.daemon, state_dir=state),
            capture=dataclasses.replace(svc.config.capture, keep_windows=3),
        ),
    )
    w = capture_file.loads(PLANTED / "sync-n3072.w1.npz")
    for i in (1, 2, 3, 10, 11):
        svc.loop.observe.keep_window(dataclasses.replace(w, job_id="j1", window_id=i))
    svc.loop.observe.keep_window(dataclasses.replace(w, job_id="j2", window_id=4))
    d = state / "windows"
    assert sorted(p.name for p in (d / "j1").iterdir()) == ["10.npz", "11.npz", "3.npz"]
    assert [p.name for p in (d / "j2").iterdir()] == ["4.npz"]
    assert (d.stat().st_mode & 0o777) == 0o700 and ((d / "j1").stat().st_mode & 0o777) == 0o700
    back = capture_file.loads(d / "j1" / "11.npz")
    assert back.window_id == 11 and len(back.processes) == len(w.processes)
    (state / "windows" / "j3").write_text("a file where the job's directory would go")
    svc.loop.observe.keep_window(dataclasses.replace(w, job_id="j3", window_id=5))  # logged, not raised
    assert "window 5 of job j3 not kept" in caplog.text


def test_paused_gitmd_takes_no_window_and_starts_no_trial_but_keeps_policies(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """Hardening issue, item 13 (`gitmctl pause`, like `tuned-adm off`): no capture window and no
    new trial while paused, a running live trial stopped (its changes reverted), the state kept
    across restarts; `resume` undoes it."""
    import threading

    from gitmd.store.pause import Pause

    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("p", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    st = svc.states.of(view.job.id)
    st.settling = False
    submitted: list[str] = []
    svc.loop.pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    running = threading.Event()
    st.experiment = running  # a live trial under way
    got = svc.set_pause(True, "uid 0 (root)", "maintenance")
    assert got.paused and got.reason == "maintenance" and running.is_set()  # the trial was stopped
    st.experiment = None
    svc.duty_cycle()
    assert submitted == []  # no window while paused
    svc.loop.choose.live(view.job.id)
    assert st.experiment is None
    assert Pause(svc.jobs.store).on  # a restarted gitmd reads it back
    assert svc.status().pause.paused and svc.status().pause.by == "uid 0 (root)"
    svc.set_pause(False, "uid 0 (root)")
    svc.duty_cycle()
    assert submitted == [view.job.id] and not Pause(svc.jobs.store).on


def test_windows_without_kernels_neither_end_the_observation_nor_count_as_a_cause(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """H200 2026-12-03 (tests/fixtures/late-kernels: real windows): two start-up windows, one with
    the step and its sync stall, then one of 2,159 syncs and no kernel ended the job's observation
    (it counted windows), and the stall — which must show in two windows in a row — was never
    tried. Now only windows with kernels past start-up count: the observation goes on, the window
    without kernels plans nothing, and the next window with kernels starts the trial."""
    late = sorted((PLANTED.parent / "late-kernels").glob("*.npz"), key=lambda p: int(p.stem))
    windows = [capture_file.loads(p.read_bytes()) for p in late]
    assert [sum(len(p.records.kernels) for p in w.processes) for w in windows] == [0, 0, 6131, 0]
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("sync", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    shown = list(windows)

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        jc.windows += 1
        return dataclasses.replace(shown.pop(0), job_id=job_id, window_id=jc.windows)

    svc.capture.capture = capture  # type: ignore[union-attr,method-assign]
    svc.loop.pool.submit = lambda fn, job_id: None  # type: ignore[method-assign,assignment,misc]
    chosen: list[str] = []
    svc.loop.choose.live = lambda jid: chosen.append(jid) or "x"  # type: ignore[method-assign,func-returns-value]
    svc.loop.choose.launch = lambda jid: "y"  # type: ignore[method-assign]
    for _ in range(4):
        svc.loop.run_window(view.job.id)
    st = svc.states.of(view.job.id)
    assert st.steady and st.evidence == 1 and not st.observed  # window 4 ended nothing
    assert len(chosen) == 1  # only window 3 was read for causes
    assert "held no kernel" in st.idle
    shown.append(windows[2])  # the kernels come again
    svc.loop.run_window(view.job.id)
    assert st.evidence == 2 and len(chosen) == 2 and not st.observed


def test_one_users_jobs_never_take_every_window_worker(tmp_path: Path) -> None:
    """Hardening issue, item 4: four window workers were shared by all, and one user's six
    unresponsive rings delayed another user's live policy by 3 minutes. A user's jobs have at most
    WINDOWS_PER_USER windows queued or open; another user's job still gets one; a window done gives
    its place back."""
    import gitmd.loop as loop_mod

    svc = make_service(tmp_path)
    mine = [
        svc.register_job(Registration(f"m{i}", ("prog",), "/", 5001, 5001, capture=False))[0].job.id
        for i in range(3)
    ]
    theirs = svc.register_job(Registration("t", ("prog",), "/", 5002, 5002, capture=False))[0].job.id
    queued: list[tuple[Any, str]] = []
    svc.loop.pool.submit = lambda fn, job_id: queued.append((fn, job_id))  # type: ignore[method-assign,assignment,misc]
    ran: list[str] = []
    svc.loop.run_window = ran.append  # type: ignore[method-assign,assignment]
    assert [svc.loop.submit_window(j) for j in mine] == [True] * loop_mod.WINDOWS_PER_USER + [False]
    assert svc.loop.submit_window(theirs)  # another user's job is not held back
    fn, job_id = queued.pop(0)
    fn(job_id)  # one of mine done: its place is free again
    assert ran == [mine[0]] and svc.loop.submit_window(mine[2])


def test_a_program_whose_observed_runs_cost_much_is_observed_more_rarely(tmp_path: Path) -> None:
    """Observing a launch-bound program costs it a share of the run no window placement avoids
    (timm trainings lost 3-30% of an observed run, H200 2026-12-04). Once the backoff says a run
    is due, its program's observed runs' cost (their cost record's share) spread over the runs
    between two observations must fit capture.observation_budget: at 5% against 1%, four runs go
    unobserved between two, and the run says so (capture.observation_budget)."""
    svc = make_service(tmp_path)
    c = svc.config.capture
    assert c.observe_runs == 2 and c.observation_budget == 0.01
    reg = Registration("t", ("python", "t.py"), "/", os.getuid(), os.getgid(), launcher_pid=os.getpid())
    seen: list[bool] = []
    for _ in range(12):
        v, _ = svc.register_job(reg)
        observed = not svc.states.of(v.job.id).resting
        seen.append(observed)
        if not observed and len(seen) == 6:
            assert "an observed run costs it 5.0%, so 4 runs go unobserved" in svc.states.of(v.job.id).resting
        cost = json.dumps({"share": 0.05 if observed else 0.0})
        svc.jobs.exited(v.job.id, 0, windows=2 if observed else 0, cost=cost)
    # the backoff alone: runs 1, 2, 4, 8; with the cost: 1, 2, then every fifth run
    assert [i + 1 for i, o in enumerate(seen) if o] == [1, 2, 7, 12]


def test_a_runs_observation_stops_where_its_window_budget_is_spent(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A recurring program whose runs live 7 s under CUDA (timm's trainings, H200 2026-12-04: 3-4 windows
    a run took most of their life; ResNet-18 bf16's two observed runs cost 9.5% and 19%) gets its
    observation late in its expected run, and only the window time its run's budget
    (capture.overhead_budget of the shortest recent run, by the launch-cost model, CUPTI left attached
    until the expected end included) pays for: the observation ends there, whatever evidence it lacks. A
    program with no known run, or whose windows cost little, is not cut short."""
    svc = make_service(tmp_path)
    c = svc.config.capture
    assert c.overhead_budget > 0
    life = 7.0

    def earlier_run(name: str, model_share: float) -> None:
        """An observed run of ``name``: ``life`` s under CUDA, its 2 s of windows costing it
        ``model_share`` of their time by the launch-cost model."""
        v, _ = svc.register_job(Registration(name, (name,), "/", os.getuid(), os.getgid()))
        cost = json.dumps({"window_s": 2.0, "capture_model_s": 2.0 * model_share})
        svc.jobs.exited(v.job.id, 0, windows=3, run_s=life, cost=cost)

    earlier_run("dear", 0.3)  # launch-bound: an open window cost it 30%
    earlier_run("cheap", 0.001)  # GPU-bound: 0.1%
    earlier_run("free", 0.0)  # nothing measurable (its cost record rounds to 0): not the worst case
    # (their second runs: observed, as the backoff observes runs 1, 2, 4, 8...)
    observe = svc.loop.observe

    launch = ring_launcher(svc, tmp_path, write_ring)

    dear, cheap, first = launch("dear", 1.0), launch("cheap", 1.0), launch("first", 1.0)
    # placement: on "dear" the budget (1% of 7 s) does not even pay for what CUPTI left attached
    # after its stretch costs until the end (0.3 * attached/launch cost a launch, over 20% of 7 s), so
    # its stretch is the short first window alone, placed to end by LATE_SHARE of 7 s; "cheap" gets
    # its whole stretch, which does not fit in 7 s: no wait; a first run waits settle_s, as before
    stretch = c.first_window_s + duty.TICK_S
    assert observe.planned_stretch_s(svc.jobs.get(dear), life) == pytest.approx(stretch)
    full = c.first_window_s + c.session_windows * (c.window_duration_s + duty.TICK_S)
    assert observe.planned_stretch_s(svc.jobs.get(cheap), life) == pytest.approx(full)
    free = launch("free", 1.0)
    assert observe.planned_stretch_s(svc.jobs.get(free), life) == pytest.approx(full)
    # a job that got its workload's policy never gets its first window before settle_s
    svc.states.of(dear).policy_id = 7
    assert observe.first_window_age_s(svc.jobs.get(dear)) == c.settle_s
    svc.states.of(dear).policy_id = 0
    assert svc.states.of(dear).settling
    assert svc.states.of(dear).settle_age_s == pytest.approx(LATE_SHARE * life - stretch)
    assert not svc.states.of(cheap).settling
    assert svc.states.of(first).settle_age_s == c.settle_s

    def windowed(job_id: str, window_s: float, kernels: int) -> None:
        """The job's windows so far, as after_window counts them."""
        st = svc.states.of(job_id)
        st.first_window_ns = time.time_ns() - int(window_s * 1e9)
        st.window_s, st.window_kernels = window_s, kernels
        st.window_model_s = window_s * min(1.0, kernels / window_s * c.launch_cost_us * 1e-6)

    # "dear" after its short first window: 50k launches/s, CUPTI attached until its expected end
    windowed(dear, c.first_window_s, int(50_000 * c.first_window_s))
    why = observe.budget_spent(dear)
    assert "window budget is spent" in why and "capture.overhead_budget" in why
    assert observe.observation_done(dear)  # whatever evidence it lacks (no step found yet)
    assert observe.end_if_done(dear) and svc.states.of(dear).observed
    assert "window budget is spent" in svc.states.of(dear).observation_note  # explain says it
    # the same windows on "cheap" (a few launches a second) fit its budget: not cut short
    windowed(cheap, c.first_window_s, 10)
    assert observe.budget_spent(cheap) == ""
    assert not observe.observation_done(cheap)  # its step not found yet: observed on, as before
    # a first run: its length unknown, its observation is not bounded by it
    windowed(first, c.first_window_s, int(50_000 * c.first_window_s))
    assert observe.budget_spent(first) == ""
