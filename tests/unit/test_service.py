"""The service facade wired to real parts (simulated GPUs, a real store, real ring files)."""

from __future__ import annotations

import dataclasses
import mmap
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitmd.capture import abi
from gitmd.capture.windows import CaptureManager
from gitmd.config import CaptureConfig, Config, SimConfig
from gitmd.jobs.liveness import ProcessWatcher
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.service import EXPIRE_UNSTARTED_S, REAP_AFTER_S, Service
from gitmd.store.db import Store
from gitmd.store.library import Library
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.sampler import Sampler
from gitmd.telemetry.sim import SimBackend


def make_service(tmp_path: Path) -> Service:
    shim = tmp_path / "libgitm_shim.so"
    shim.write_bytes(b"\x7fELF")
    cfg = Config(capture=CaptureConfig(shim_path=shim), sim=SimConfig(gpus=1))
    store = Store(tmp_path / "g.db")
    backend = SimBackend(cfg.sim)
    backend.open()
    telemetry = TelemetryStore(store)
    return Service(
        cfg,
        backend,
        Sampler(backend, telemetry, 1.0),
        telemetry,
        JobRegistry(store, tmp_path / "run", cfg.capture),
        CaptureManager(abi.load(), cfg.capture.kinds, 250, ProcessWatcher()),
        Library(store),
    )


_MAPPINGS: list[mmap.mmap] = []  # this process maps the rings that name it, as the shim would


def live_ring(job_dir: str, write_ring: Callable[..., Path], age_s: float | None = None) -> None:
    """A ring in the job's directory whose header names this (living) test process, mapped by it
    (gitmd trusts a ring's pid only when that process maps the file); ``age_s``: the process's age as
    the ring states it (a first run's first window waits until it is settle_s)."""
    import time

    data = bytearray(write_ring(10, 64).read_bytes())
    data[40:44] = os.getpid().to_bytes(4, "little")
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    if age_s is not None:
        data[56:64] = (time.time_ns() - int(age_s * 1e9)).to_bytes(8, "little")  # created_real_ns
    path = Path(job_dir) / "ring-1-1.gitm"
    path.write_bytes(bytes(data))
    with open(path, "r+b") as f:
        _MAPPINGS.append(mmap.mmap(f.fileno(), 0))


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


def test_a_live_job_is_never_reaped(tmp_path: Path, write_ring: Callable[..., Path]) -> None:
    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("live", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    assert [alive for _, alive in svc.get_job(view.job.id).processes] == [True]
    assert svc.reap(view.job.created_ns + int(10_000 * 1e9)) == []


def test_the_duty_cycle_waits_for_a_jobs_stretched_period(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A launch-bound job's period is stretched to hold the overhead budget; the duty tick must not
    open its window early (it did: the period was computed and never checked), and a job under
    experiment gets no duty windows at all."""
    import threading
    import time

    svc = make_service(tmp_path)
    view, plan = svc.register_job(Registration("live", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring, age_s=60)  # past start-up: its window is due
    submitted: list[str] = []
    svc._duty_pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc.duty_cycle()
    assert submitted == [view.job.id]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    jc.next_due_mono = time.monotonic() + 60  # stretched: not due for a minute
    svc.duty_cycle()
    assert submitted == [view.job.id]
    jc.next_due_mono = 0.0
    svc._exp_running[view.job.id] = threading.Event()
    svc.duty_cycle()
    assert submitted == [view.job.id]
    del svc._exp_running[view.job.id]
    svc.duty_cycle()
    assert submitted == [view.job.id, view.job.id]


def test_a_known_long_jobs_first_window_waits_until_its_processes_have_settled(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """Until a process is 10 s old the shim closes a window without detaching CUPTI (detaching then
    crashed jobs on the H200), so a start-up window costs a launch-bound job ~40% until then: a
    recurring job whose earlier runs all lasted at least twice capture.settle_s gets no duty window
    before its processes are settle_s old, nor does a first run (taken as long until it has shown
    otherwise). A job one of whose runs was short, a launch trial's run and a job with a live policy
    whose lever needs a window get theirs at once; a job that got its workload's policy and is not
    explored waits, whatever its runs' length."""
    import time

    svc = make_service(tmp_path)
    settle = svc.config.capture.settle_s
    assert settle > 0

    def earlier_run(name: str, seconds: float) -> None:
        v, _ = svc.register_job(Registration(name, (name,), "/", os.getuid(), os.getgid()))
        svc.jobs.exited(v.job.id, 0)
        with svc.jobs.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET created_ns = ended_ns - ? WHERE id = ?", [int(seconds * 1e9), v.job.id]
            )

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
            _MAPPINGS.append(mmap.mmap(f.fileno(), 0))
        return v.job.id

    for _ in range(2):
        earlier_run("long", 3 * settle)
    earlier_run("short", 3 * settle)
    earlier_run("short", settle)  # one of its runs was short: it may be again
    submitted: list[str] = []
    svc._duty_pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    young = launch("long", 1.0)
    first = launch("first", 1.0)
    short = launch("short", 1.0)
    settled = launch("long", settle + 1.0)
    svc.duty_cycle()
    assert sorted(submitted) == sorted([short, settled])
    assert young in svc._settling and first in svc._settling and settled not in svc._settling
    # its processes settle: the first window comes
    ring = Path(svc.get_job(young).job.runtime_dir) / "ring-1-1.gitm"
    data = bytearray(ring.read_bytes())
    data[56:64] = (time.time_ns() - int((settle + 0.5) * 1e9)).to_bytes(8, "little")
    ring.write_bytes(bytes(data))
    submitted.clear()
    for j in (short, settled):
        svc.capture.get(j).next_due_mono = time.monotonic() + 60  # type: ignore[union-attr]
    svc.duty_cycle()
    assert submitted == [young] and young not in svc._settling and first in svc._settling
    # a launch trial's run and a job with a live policy pending keep the early window
    from gitmd.jobs.launch import LaunchPlan

    job = svc.jobs.get(young)
    assert svc._settles(job, LaunchPlan({}, ()))
    assert not svc._settles(job, LaunchPlan({}, (), trial="launch trial 1: arm A"))
    svc._live_pending[job.id] = [1, [{"lever": "stream_priority", "setting": {}}], 0]
    assert not svc._settles(job, LaunchPlan({}, ()))  # a window finds the stream to raise
    svc._live_pending[job.id] = [1, [{"lever": "cpu_affinity", "setting": {}}], 0]
    assert svc._settles(job, LaunchPlan({}, ()))  # applied from the tick, as its processes show
    del svc._live_pending[job.id]
    brief = svc.jobs.get(short)
    assert not svc._settles(brief, LaunchPlan({}, ()))
    svc._policies[brief.id] = 7  # it got its workload's policy: known, not explored
    assert svc._settles(brief, LaunchPlan({}, ()))
    svc._policies[brief.id] = 0


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
    one (~70k launches/s) alike, each window capped at what the budget allows over a period."""
    import dataclasses

    from gitmd.capture import capture_file, duty
    from gitmd.config import ExperimentsConfig

    svc = make_service(tmp_path)
    svc.config = dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False))
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)  # its ring seen: the job is tracked
    seen = capture_file.loads(Path(__file__).resolve().parents[1] / "fixtures" / "planted" / fixture)
    asked: list[float] = []
    caps: list[int | None] = []

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        asked.append(duration_s)
        caps.append(max_records)
        return dataclasses.replace(seen, job_id=job_id, window_id=len(asked))

    submitted: list[str] = []
    svc.capture.capture = capture  # type: ignore[union-attr,method-assign]
    svc._duty_pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    c = svc.config.capture
    svc._duty_window(view.job.id)
    assert asked == [c.first_window_s]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None
    if full_at_once:  # and the process's observation under way: its windows come close together
        assert submitted == [view.job.id] and jc.period_s == duty.TICK_S
        svc._duty_window(view.job.id)  # the full window, from the pool
        assert asked == [c.first_window_s, c.window_duration_s] and submitted == [view.job.id]
        # capped at what the budget allows over the period: 0.01 x 30 s / 6 us = 50k launches
        assert caps == [50_000, 50_000]
    else:  # its observation comes a tick apart all the same (CUPTI stays attached in between), each
        # window capped by the budget: 50k launches, ~0.7 s of this job's ~70k/s
        assert submitted == [view.job.id] and jc.period_s == duty.TICK_S
        svc._duty_window(view.job.id)
        assert asked == [c.first_window_s, c.window_duration_s] and caps == [50_000, 50_000]


def test_a_process_is_observed_in_one_stretch_then_its_cupti_detached_once(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """Attaching CUPTI again after a detach crashed jobs (H200, CUDA 13.0), so a process's windows come
    in one stretch at the start-up pace — CUPTI attached, its activity off, in between — and once
    capture.session_windows windows are analysed and nothing gitmd runs needs another, its shim is told
    to detach (GITM_KNOB_DETACH, once) and the duty cycle gives it no window again. A real H200 window
    stands for the job."""
    import dataclasses

    from gitmd.capture import capture_file, duty
    from gitmd.config import ExperimentsConfig

    svc = make_service(tmp_path)
    svc.config = dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False))
    c = svc.config.capture
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)
    seen = capture_file.loads(
        Path(__file__).resolve().parents[1] / "fixtures" / "planted" / "bf16-n8192.w2.npz"
    )
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
    svc._duty_pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    for _ in range(1, c.session_windows):
        svc._duty_window(view.job.id)
        assert ended == [] and jc.period_s == duty.TICK_S  # the stretch goes on, windows a tick apart
    svc._duty_window(view.job.id)  # the last one the observation needs
    assert ended == [view.job.id] and jc.windows == c.session_windows
    assert not svc.capture.observable(view.job.id)
    submitted.clear()
    jc.next_due_mono = 0.0
    svc.duty_cycle()  # due, but its process's observation has ended: no window
    assert submitted == []


def test_until_a_window_finds_the_jobs_step_its_windows_come_at_the_startup_pace(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A 15-s job (fp32_mlp, H200 2026-12-03) had its windows in start-up and none after: until a
    window finds the step, the next comes a tick later, at most STARTUP_WINDOWS times; a found step
    (past the process's observation windows) restores the configured period. Real H200 windows."""
    import dataclasses

    from gitmd.capture import capture_file, duty
    from gitmd.config import ExperimentsConfig

    svc = make_service(tmp_path)
    svc.config = dataclasses.replace(svc.config, experiments=ExperimentsConfig(enabled=False))
    c = svc.config.capture
    assert 0 < duty.TICK_S < c.window_every_s
    view, plan = svc.register_job(Registration("job", ("prog",), "/", os.getuid(), os.getgid()))
    live_ring(plan.env["GITM_JOB_DIR"], write_ring)
    svc.get_job(view.job.id)
    steady = capture_file.loads(
        Path(__file__).resolve().parents[1] / "fixtures" / "planted" / "bf16-n8192.w2.npz"
    )
    startup = dataclasses.replace(steady, processes=())  # CUDA up, no kernels yet
    shown = [startup]
    jc = svc.capture.get(view.job.id)  # type: ignore[union-attr]
    assert jc is not None

    def capture(job_id: str, duration_s: float, max_records: int | None = None) -> Any:
        jc.windows += 1  # as the real one counts an analysed window
        return dataclasses.replace(shown[0], job_id=job_id)

    svc.capture.capture = capture  # type: ignore[union-attr,method-assign]
    submitted: list[str] = []
    svc._duty_pool.submit = lambda fn, job_id: submitted.append(job_id)  # type: ignore[method-assign,assignment,misc]
    svc._duty_window(view.job.id)  # the short first window: start-up
    assert jc.period_s == duty.TICK_S and submitted == [view.job.id]  # the full one at once
    for _ in range(c.session_windows):  # full windows: still start-up, however many
        svc._duty_window(view.job.id)
        assert jc.period_s == duty.TICK_S and submitted == [view.job.id]
    shown[0] = steady
    svc._duty_window(view.job.id)  # the step found, past the observation's windows
    assert jc.period_s == c.window_every_s
    # a job that never shows a step: the start-up pace for STARTUP_WINDOWS windows only
    other, other_plan = svc.register_job(Registration("idle", ("prog",), "/", os.getuid(), os.getgid()))
    ring = Path(plan.env["GITM_JOB_DIR"]) / "ring-1-1.gitm"
    (Path(other_plan.env["GITM_JOB_DIR"]) / ring.name).write_bytes(ring.read_bytes())
    svc.get_job(other.job.id)
    jo = svc.capture.get(other.job.id)  # type: ignore[union-attr]
    assert jo is not None
    shown[0] = startup
    svc._duty_window(other.job.id)
    assert jo.period_s == duty.TICK_S
    jo.windows = duty.STARTUP_WINDOWS
    svc._duty_window(other.job.id)
    assert jo.period_s == c.window_every_s
    # a launch trial's run: no window at all — it is measured by its own clock, CUPTI never attached
    run, run_plan = svc.register_job(Registration("trial", ("prog",), "/", os.getuid(), os.getgid()))
    (Path(run_plan.env["GITM_JOB_DIR"]) / ring.name).write_bytes(ring.read_bytes())
    svc.get_job(run.job.id)
    jr = svc.capture.get(run.job.id)  # type: ignore[union-attr]
    assert jr is not None
    svc._trial_runs[run.job.id] = 1
    submitted.clear()
    jr.next_due_mono = 0.0
    svc.duty_cycle()
    assert run.job.id not in submitted and jr.windows == 0


def _recurring(svc: Service, key: str) -> str:
    import json as _json

    doc = {
        "format": "gitm-library",
        "version": 1,
        "workloads": [
            {
                "id": "00c0ffee0003",
                "name": "train",
                "signature": {"sequence": ["sgemm"], "shares": {"sgemm": 1.0}},
                "first_seen_ns": 1,
                "last_seen_ns": 2,
                "run_count": 1,
                "launch_keys": [key],
                "policies": [],
            }
        ],
    }
    svc.import_library(_json.dumps(doc).encode())
    return "00c0ffee0003"


def _run(
    svc: Service, contract: object, run_s: float | None, loss: float, exit_code: int = 0
) -> tuple[str, str, dict[str, str]]:
    from gitmd.experiments.equivalence import Contract

    assert isinstance(contract, Contract)
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(dataclasses_replace(reg, contract=contract))
    # the run's length by its own clock, as its rings and their exits give it (a GPU job's; none here)
    svc._run_s = lambda job_id: run_s  # type: ignore[method-assign]
    svc.report_exit(view.job.id, exit_code, {r"loss=(\S+)": [loss]})
    arm = plan.trial.split("arm ")[1][0] if plan.trial else "-"
    return view.job.id, arm, plan.env


def dataclasses_replace(obj: Registration, **kw: object) -> Registration:
    import dataclasses

    return dataclasses.replace(obj, **kw)  # type: ignore[arg-type]


def test_launch_trial_across_runs_promotes_and_the_next_launch_gets_the_policy(tmp_path: Path) -> None:
    from gitmd.experiments.equivalence import Check, Contract
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    for s in (10.0, 10.2):  # two plain runs: the workload's run-to-run spread is measured
        _run(svc, contract, s, 1.0)
    # as a window's attribution plans it: fp32 GEMMs cost 90% of the run
    t = svc.trials.plan(wid, make("tf32_override"), "fp32_gemm", 0.9)
    assert t is not None and svc.trials.plan(wid, make("cpu_threads"), "x") is None  # one at a time
    arms = []
    for i in range(2):  # 5x faster runs in the first pair, far beyond 2% spread: decided early
        _, arm, env = _run(svc, contract, 2.0 if i == 1 else 10.0, 1.001 if i == 1 else 1.0)
        arms.append(arm)
        assert (env.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1") == (arm == "B")
    assert arms == ["A", "B"]
    (done,) = svc.trials.of_workload(wid)
    assert (
        done.state == "promoted"
        and done.decision["low"] > 4
        and "decided after 1 of 3 pairs" in done.decision["reason"]
    )
    w = svc.workload(wid)
    (policy,) = w.policies
    assert policy.env == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"} and policy.evidence["source"] == "runs"
    assert policy.evidence["scope_uid"] == os.getuid()  # numbers the launcher reported: its user's
    _, arm, env = _run(svc, contract, 2.0, 1.0)
    assert arm == "-" and env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"  # at launch, no trial


def test_a_launch_trial_with_a_modest_gain_takes_its_full_rounds(tmp_path: Path) -> None:
    """1.25x is within reach of the drift between runs: no early stop, AB BA AB pairs, then the
    paired bootstrap decides."""
    from gitmd.experiments.equivalence import Check, Contract
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    assert svc.trials.plan(wid, make("cpu_threads"), "host_contention") is not None
    arms = []
    for i in range(6):
        arm_b = i in (1, 2, 5)  # the order the trial hands out: A B, B A, A B
        _, arm, _ = _run(svc, contract, 8.0 if arm_b else 10.0, 1.0)
        arms.append(arm)
        if i < 5:
            assert svc.trials.of_workload(wid)[0].state == "running"
    assert arms == ["A", "B", "B", "A", "A", "B"]
    (done,) = svc.trials.of_workload(wid)
    assert done.state == "promoted" and done.decision["pairs"] == 3 and done.decision["low"] > 1.2


def test_launch_trial_with_changed_outputs_or_no_steps_is_not_promoted(tmp_path: Path) -> None:
    from gitmd.experiments.equivalence import Check, Contract
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-4)))
    svc.trials.plan(wid, make("tf32_override"), "fp32_gemm")
    for i in range(6):
        arm_b = i in (1, 2, 5)
        _run(svc, contract, 2.0 if arm_b else 10.0, 1.01 if arm_b else 1.0)  # faster, loss moved 1%
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "reverted" and "outputs changed" in t.decision["reason"]
    assert svc.workload(wid).policies == ()

    svc.trials.plan(wid, make("alloc_expandable_segments"), "allocator")
    for _ in range(6):
        _run(svc, contract, None, 1.0)  # runs that never initialised CUDA under the shim: no length
    t2 = svc.trials.of_workload(wid)[-1]
    assert t2.state == "abandoned" and "no length" in t2.decision["reason"]


def test_a_launch_trial_as_the_api_shows_it(tmp_path: Path) -> None:
    from gitmd.api.convert import trial_to_pb
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    t = svc.trials.plan(wid, make("alloc_gc_threshold"), "allocator")
    assert t is not None
    svc.trials.assign(wid, "job1", 0)
    svc.trials.finish_run("job1", t.id, 4.0, 0, {})
    svc.trials.assign(wid, "job2", 0)
    (t,) = svc.trials.of_workload(wid)
    msg = trial_to_pb(t)
    assert msg.lever == "alloc_gc_threshold" and msg.state == "running" and msg.cause == "allocator"
    assert [(r.job_id, r.arm, r.done) for r in msg.runs] == [("job1", "A", True), ("job2", "B", False)]
    assert msg.runs[0].run_s == 4.0 and msg.runs[0].exit_code == 0 and not msg.runs[1].HasField("run_s")
    assert not msg.HasField("speedup")


def test_a_recurring_jobs_live_policy_is_applied_when_its_process_shows(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    import json as _json

    if len(os.sched_getaffinity(0)) < 2:
        import pytest

        pytest.skip("needs two CPUs")
    svc = _service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(reg)
    (policy,) = svc.workload("00c0ffee0003").policies
    assert (
        plan.policy_id == policy.id
        and _json.loads(_json.dumps(list(policy.live)))[0]["lever"] == "cpu_affinity"
    )
    child = _mapping_child(plan.env["GITM_JOB_DIR"])
    try:
        first = min(os.sched_getaffinity(0))
        os.sched_setaffinity(child.pid, {first})  # started squeezed onto one core
        _ring_for(write_ring, plan.env["GITM_JOB_DIR"], child.pid)
        assert [alive for _, alive in svc.get_job(view.job.id).processes] == [True]
        ran: list[object] = []

        def run_now(fn: Callable[[str], None], job_id: str) -> None:
            ran.append(fn)
            fn(job_id)

        svc._duty_pool.submit = run_now  # type: ignore[method-assign,assignment]
        # the duty tick: a known job settles (no window before its processes are settle_s old), and
        # a lever that needs no window is applied from the tick itself
        svc.duty_cycle()
        assert view.job.id in svc._settling and view.job.id not in svc._live_pending
        assert ran and svc._duty_window not in ran
        moved = os.sched_getaffinity(child.pid)
        assert len(moved) >= 2 and moved != {first}
        (iv,) = svc.interventions.list(view.job.id)
        assert iv.lever == "cpu_affinity" and iv.state == "promoted" and f"policy {policy.id}" in iv.reason
        assert (view.job.id, "cpu_affinity") in svc._exp_tried  # no experiment on it in this run
        # changed by gitmd: its windows no longer re-fingerprint it (a changed step would be taken
        # for another workload, the policy then stored where the next launch never looks)
        assert svc._changed(view.job.id)
        other, _ = svc.register_job(
            Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid())
        )
        assert not svc._changed(other.job.id)
        svc.report_exit(view.job.id, 0)
        assert os.sched_getaffinity(child.pid) == moved  # promoted: kept while the process runs
    finally:
        child.kill()
        child.wait()


def test_a_cpu_affinity_policy_comes_with_the_launch_plan_and_is_set_at_exec(
    tmp_path: Path, write_ring: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validated cpu_affinity policy is chosen at registration, as many CPUs as the launcher starts
    on, and comes back in the plan, for the launcher to set before exec (contended, H200: the policy
    set a tick after the first CUDA call left the import and the first steps on the busy cores). A
    process already on those CPUs gets the policy's intervention recorded (its revert goes back to
    the CPUs the launcher started on; a CPU the host lacks is dropped); one whose launcher ignored the
    plan gets them set from the tick."""

    import gitmd.service as service_mod

    start = os.sched_getaffinity(0)
    if len(start) < 2:
        pytest.skip("needs two CPUs")
    first = min(start)
    chosen: list[tuple[int, set[int] | None]] = []

    def quiet(
        count: int, prefer: set[int] | None = None, interval_s: float = 0.2, load: object = None
    ) -> set[int]:
        chosen.append((count, None))
        return {first}  # the quietest CPU, as if the others were busy

    monkeypatch.setattr(service_mod, "quiet_cpus", quiet)
    svc = _service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration(
        "train",
        ("python", "train.py"),
        "/srv",
        os.getuid(),
        os.getgid(),
        launch_key="train",
        cpus=(*start, 9999),
    )
    view, plan = svc.register_job(reg)
    assert plan.cpus == (first,) and chosen[-1][0] == max(2, min(len(start), 8))
    assert svc._live_pending[view.job.id][1][0]["at_exec"] == [first]
    # no CPUs said (a scheduler's registration): nothing at exec, the tick finds CPUs as before
    other, plain = svc.register_job(dataclasses.replace(reg, cpus=()))
    assert plain.cpus == () and "at_exec" not in svc._live_pending[other.job.id][1][0]
    svc._live_pending.pop(other.job.id)
    svc._duty_pool.submit = lambda fn, job_id: fn(job_id)  # type: ignore[method-assign,assignment]
    for honoured in (True, False):
        if not honoured:
            view, plan = svc.register_job(reg)
        child = _mapping_child(plan.env["GITM_JOB_DIR"])
        try:
            os.sched_setaffinity(child.pid, set(plan.cpus) if honoured else start)
            _ring_for(write_ring, plan.env["GITM_JOB_DIR"], child.pid, threads=1 if honoured else 2)
            svc.get_job(view.job.id)
            svc.duty_cycle()
            assert view.job.id not in svc._live_pending
            assert os.sched_getaffinity(child.pid) == {first}
            assert (view.job.id, "cpu_affinity") in svc._exp_tried  # no experiment on it in this run
            (iv,) = svc.interventions.list(view.job.id)
            assert iv.lever == "cpu_affinity" and iv.state == "promoted"
            assert ("set at exec by its launcher" in iv.reason) == honoured
            # the policy's intervention either way: reverting it puts the job back where it started
            svc.revert_intervention(iv.id, "operator")  # as `gitmctl revert` does
            assert os.sched_getaffinity(child.pid) == start
        finally:
            child.kill()
            child.wait()


def _service_with_policy(tmp_path: Path, live: list[dict[str, object]]) -> Service:
    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    svc.library.add_policy(wid, {}, "validated", 2.0, (1.5, 2.5), {"source": "live"}, live=live)
    return svc


def test_a_launch_trial_is_planned_only_for_a_cause_seen_in_two_windows_in_a_row(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gitmd.analysis.causes import LEVERS, Cause
    from gitmd.experiments.equivalence import Check, Contract

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2),))
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(dataclasses_replace(reg, contract=contract))
    assert svc.jobs.get(view.job.id).workload_id == wid

    def window(n: int, *names: str) -> None:
        causes = [Cause(c, 1e6, 0.5, 0.7, ("x",), LEVERS[c], True) for c in names]
        svc.attribution = lambda job_id, window_id=0: SimpleNamespace(window_id=n, causes=causes)  # type: ignore[method-assign]
        svc._maybe_plan_trial(view.job.id)

    # start-up, before any window found the job's step: its windows do not count, however alike
    window(-2, "pageable_copy")
    window(-1, "pageable_copy")
    assert svc.trials.of_workload(wid) == []
    svc._steady.add(view.job.id)  # a window found the step
    window(1, "pageable_copy")  # start-up: the weights copied once
    window(2, "fp32_gemm")
    window(2, "fp32_gemm")  # the same window again: still one
    assert svc.trials.of_workload(wid) == []
    window(3, "fp32_gemm")
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "tf32_override" and t.cause == "fp32_gemm"


def test_a_run_too_short_for_two_windows_pairs_its_first_with_the_previous_runs_last(tmp_path: Path) -> None:
    """fp32_mlp on the H200 (2026-12-03): 15-s runs, a short first window in start-up and one full
    window each; no run ever saw the cause twice, so no trial was planned in two launches."""
    from types import SimpleNamespace

    from gitmd.analysis.causes import LEVERS, Cause
    from gitmd.experiments.equivalence import Check, Contract

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2),))
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")

    def run() -> str:
        view, _ = svc.register_job(dataclasses_replace(reg, contract=contract))
        assert svc.jobs.get(view.job.id).workload_id == wid
        return view.job.id

    def window(job_id: str, n: int, *names: str) -> None:
        svc._steady.add(job_id)  # each window here is past start-up
        causes = [Cause(c, 1e6, 0.5, 0.7, ("x",), LEVERS[c], True) for c in names]
        svc.attribution = lambda job_id, window_id=0: SimpleNamespace(window_id=n, causes=causes)  # type: ignore[method-assign]
        svc._maybe_plan_trial(job_id)

    first = run()
    window(first, 1, "pageable_copy")  # start-up
    window(first, 2, "fp32_gemm")  # its last window
    svc.report_exit(first, 0)
    second = run()
    window(second, 3, "pageable_copy")  # start-up again: not in the previous run's last window
    assert svc.trials.of_workload(wid) == []
    third = run()
    window(third, 4, "fp32_gemm")  # paired with the second run's last window: no
    assert svc.trials.of_workload(wid) == []
    svc.report_exit(third, 0)
    fourth = run()
    window(fourth, 5, "fp32_gemm")  # its first window, paired with the third run's last
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "tf32_override" and t.cause == "fp32_gemm"


def test_runs_a_restarted_gitmd_cannot_measure_are_closed_without_a_step_time(tmp_path: Path) -> None:
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    t = svc.trials.plan(wid, make("alloc_gc_threshold"), "allocator")
    assert t is not None
    svc.trials.assign(wid, "job1", 0)
    svc.trials.finish_run("job1", t.id, 3.0, 0, {})
    svc.trials.assign(wid, "job2", 0)  # gitmd dies while job2 runs
    assert svc.trials.close_open_runs("gitmd restarted during the run") == 1
    (t,) = svc.trials.of_workload(wid)
    assert [(r["job_id"], r["done"], r.get("run_s")) for r in t.runs] == [
        ("job1", True, 3.0),
        ("job2", True, None),
    ]
    assert t.state == "running" and t.spoiled() == 1 and t.next_arm() == "B"  # the trial goes on


# A process standing for a job's: it maps its ring, as the shim does, once the ring appears (gitmd
# trusts a ring's pid only when that process maps the file), then idles.
_MAPPER = """
import mmap, os, sys, time
path = os.path.join(sys.argv[1], f"ring-{os.getpid()}-1.gitm")
while not os.path.exists(path):
    time.sleep(0.01)
m = mmap.mmap(os.open(path, os.O_RDWR), 0)
time.sleep(60)
"""


def _mapping_child(job_dir: str) -> subprocess.Popen[bytes]:
    import sys

    return subprocess.Popen([sys.executable, "-c", _MAPPER, job_dir])


def _ring_for(write_ring: Callable[..., Path], job_dir: str, pid: int, threads: int = 1) -> None:
    """A ring file in the job's directory that names a live process (its pid and start time), and
    that process (a _mapping_child) mapping it."""
    import time

    ring = write_ring(10, 64, threads)  # a directory of its own per call
    data = bytearray(ring.read_bytes())
    data[40:44] = pid.to_bytes(4, "little")
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    final = Path(job_dir) / f"ring-{pid}-1.gitm"
    tmp = Path(job_dir) / f".ring-{pid}.tmp"
    tmp.write_bytes(bytes(data))
    os.rename(tmp, final)  # whole, at once: the child maps the finished file
    ino = f" {final.stat().st_ino} "
    deadline = time.monotonic() + 10
    while ino not in Path(f"/proc/{pid}/maps").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_background_cotenant_on_the_same_gpu_is_what_cotenant_yield_acts_on(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    fg, fg_plan = svc.register_job(Registration("train", ("python", "t.py"), "/srv", *me, gpus=(0,)))
    _, og_plan = svc.register_job(
        Registration("elsewhere", ("python", "e.py"), "/srv", *me, gpus=(1,), background=True)
    )
    bg, bg_plan = svc.register_job(Registration("hog", ("python", "h.py"), "/srv", *me, background=True))
    procs = [_mapping_child(p.env["GITM_JOB_DIR"]) for p in (fg_plan, og_plan, bg_plan)]
    try:
        for i, (plan, p) in enumerate(zip((fg_plan, og_plan, bg_plan), procs, strict=True)):
            _ring_for(write_ring, plan.env["GITM_JOB_DIR"], p.pid, threads=i + 1)
        fg_job = svc.jobs.get(fg.job.id)
        assert [j.id for j in svc._background_cotenants(fg_job)] == [bg.job.id]  # GPU 1 is not shared
        assert (
            svc._background_cotenants(svc.jobs.get(bg.job.id)) == []
        )  # a background job yields, never gains
        lever = svc._live_lever("cotenant_yield", fg_job)
        assert lever is not None and lever.setting["pids"] == [procs[2].pid]
        assert lever.setting["jobs"] == [bg.job.id] and lever.setting["share"] == 750
        target = svc._target(fg.job.id)
        assert target.pids == (procs[0].pid,)  # host levers still act on the job's own processes only
        assert procs[2].pid in target.rings and target.ring_uids == {procs[2].pid: os.getuid()}
        stored = svc.interventions.describe(target)
        again = svc.interventions.rebuild(stored)  # what a restarted gitmd reverts through
        assert again.rings == target.rings and again.ring_uids == target.ring_uids
        procs[2].kill()
        procs[2].wait()
        assert procs[2].pid not in svc.interventions.rebuild(stored).rings  # gone: nothing to revert
        import time

        deadline = time.monotonic() + 10
        while svc._live_lever("cotenant_yield", fg_job) is not None and time.monotonic() < deadline:
            time.sleep(0.1)  # the process watcher notices the exit
        assert svc._live_lever("cotenant_yield", fg_job) is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_yield_in_force_is_taken_back_when_the_job_it_yielded_to_ends(tmp_path: Path) -> None:
    """renew_yields: a promoted cotenant_yield whose foreground job ended is reverted (the
    co-tenant here is gone too, so there is nothing to send: the record still says why)."""
    import json as _json
    import time

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    view, _ = svc.register_job(Registration("train", ("python", "t.py"), "/srv", *me))
    now = time.time_ns()
    target = {"pids": [], "rings": {"999999": "/nonexistent"}, "ring_uids": {"999999": [os.getuid(), 1]}}
    with svc.interventions.store.transaction() as db:
        db.conn.execute(
            "INSERT INTO interventions (job_id, lever, kind, setting, target, saved, state, created_ns, "
            "updated_ns) VALUES (?, 'cotenant_yield', 'live-shim', ?, ?, ?, 'promoted', ?, ?)",
            (view.job.id, _json.dumps({"pids": [999999], "share": 750}), _json.dumps(target),
             _json.dumps({"shares": {"999999": 0}}), now, now),
        )  # fmt: skip
    (iv,) = svc.interventions.in_force("cotenant_yield")
    svc.renew_yields()  # the job still runs: kept (the renewal finds no co-tenant ring, says so)
    assert svc.interventions.get(iv.id).state == "promoted"
    svc.report_exit(view.job.id, 0)
    svc.renew_yields()
    after = svc.interventions.get(iv.id)
    assert after.state == "reverted" and after.reason == "the job it yielded to ended"
    assert svc.interventions.in_force("cotenant_yield") == []


def test_sync_spin_is_tried_only_on_a_context_that_sleeps_in_its_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context's scheduling is read through the shim first: auto already spins while the host
    has more cores than contexts, and spin needs nothing; yield and blocking sync can gain. A shim
    that cannot answer (no driver, an older shim) means no experiment."""
    from gitmd.levers.base import LeverError
    from gitmd.levers.shim_knobs import SyncSpin

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    reply, _ = svc.register_job(Registration("sync", ("python", "s.py"), "/srv", *me))
    job = svc.jobs.get(reply.job.id)
    answers: list[int | Exception] = [0, 1, 2, 4, LeverError("sync_spin on pid 1: no libcuda")]

    def current(self: SyncSpin, target: object) -> int:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    monkeypatch.setattr(SyncSpin, "current", current)
    got = [svc._sync_spin(job, 4242, 0) for _ in range(5)]
    assert [g is not None for g in got] == [False, False, True, True, False]
    lever = got[2]
    assert lever is not None and lever.setting == {"pid": 4242, "device": 0, "sched": SyncSpin.SPIN}


def test_a_launch_with_its_validated_policy_is_not_explored(tmp_path: Path) -> None:
    """The recurring case runs with zero experiment windows (contended and transformer, H200
    2026-12-03: launches that got the policy were explored again for what remained of the cause);
    `experiments.explore_known` turns that back on; a job without a policy is explored only past
    its start-up."""
    import dataclasses
    from types import SimpleNamespace

    from gitmd.analysis.causes import LEVERS, Cause

    svc = _service_with_policy(tmp_path, [{"lever": "sched_priority", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    known, plan = svc.register_job(reg)
    assert plan.policy_id
    fresh, _ = svc.register_job(Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid()))
    looked: list[str] = []

    def attribution(job_id: str, window_id: int = 0) -> object:
        looked.append(job_id)
        cause = Cause("host_contention", 1e6, 0.5, 0.7, ("x",), LEVERS["host_contention"], True)
        return SimpleNamespace(window_id=len(looked), causes=[cause])

    svc.attribution = attribution  # type: ignore[method-assign]
    for job in (known.job.id, fresh.job.id):
        svc._steady.add(job)
        svc._maybe_experiment(job)
        svc._maybe_plan_trial(job)
    assert known.job.id not in looked and fresh.job.id in looked
    assert svc._known(known.job.id) and not svc._known(fresh.job.id)

    looked.clear()
    starting, _ = svc.register_job(
        Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid())
    )
    svc._maybe_experiment(starting.job.id)  # no window has found its step yet: start-up
    assert looked == []

    svc.config = dataclasses.replace(
        svc.config, experiments=dataclasses.replace(svc.config.experiments, explore_known=True)
    )
    assert not svc._known(known.job.id)


def test_an_experiment_needs_its_cause_in_two_windows_in_a_row(tmp_path: Path) -> None:
    """A bf16 job's warm-up window looked like a 25% sync stall on the H200 (2026-12-03) and a CPU
    experiment ran on it at once; its steady windows show none. A live experiment now needs its
    cause above threshold in the window before too — of this run, or for a run's first window, the
    previous run's last one — as launch trials already did."""
    from types import SimpleNamespace

    from gitmd.analysis.causes import LEVERS, Cause
    from gitmd.levers.registry import make as make_lever

    svc = make_service(tmp_path)
    me = (os.getuid(), os.getgid())
    shown: list[list[str]] = []

    def attribution(job_id: str, window_id: int = 0) -> object:
        causes = [Cause(n, 1e6, 0.5, 0.7, ("x",), LEVERS[n], True) for n in shown[-1]]
        return SimpleNamespace(window_id=len(shown), causes=causes)

    tried: list[tuple[str, str]] = []
    svc.attribution = attribution  # type: ignore[method-assign]
    svc._live_lever = lambda name, job: make_lever("sched_priority", nice=-5)  # type: ignore[method-assign]
    svc._exp_pool.submit = lambda fn, job_id, lever, cause, cancel, share: tried.append((job_id, cause))  # type: ignore[method-assign,assignment,misc]

    def run() -> str:
        view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", *me))
        svc.jobs.set_workload(view.job.id, "w1")
        svc._steady.add(view.job.id)
        return view.job.id

    def window(job_id: str, causes: list[str]) -> None:
        shown.append(causes)
        svc._maybe_experiment(job_id)

    first = run()
    window(first, ["sync_stall"])  # start-up: seen once
    window(first, [])  # steady: gone
    window(first, ["host_contention"])
    assert tried == []
    window(first, ["host_contention"])  # twice in a row
    assert tried == [(first, "host_contention")]
    svc._exp_running.pop(first, None)
    # the next run's first window: the previous run's last window had the cause too
    second = run()
    window(second, ["host_contention"])
    assert tried[-1] == (second, "host_contention")


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


def test_a_cache_lever_tried_live_gets_no_launch_trial_of_its_launch_form(tmp_path: Path) -> None:
    """alloc_churn: the allocator cause lists alloc_keep_cache_live first (decided within the run).
    While a live experiment acts on that cause nothing is planned for it across runs; once the live
    form was tried, its launch form (alloc_keep_cache) is not, and the next launch lever is. Every
    captured launch carries GITMD_LIVE_FLAGS=1, so gitmd's hook in the job can read the flag."""
    import threading
    from types import SimpleNamespace

    from gitmd.analysis.causes import CACHE_LEVERS, LEVERS, Cause

    svc = make_service(tmp_path)
    wid = _recurring(svc, "churn")
    reg = Registration("churn", ("python", "c.py"), "/srv", os.getuid(), os.getgid(), launch_key="churn")
    view, plan = svc.register_job(reg)
    job_id = view.job.id
    assert plan.env["GITMD_LIVE_FLAGS"] == "1" and plan.env["GITM_SITE"]
    levers = (*CACHE_LEVERS, *(x for x in LEVERS["allocator"] if x not in CACHE_LEVERS))
    svc._steady.add(job_id)

    def window(n: int) -> None:
        causes = [Cause("allocator", 1e6, 0.6, 0.8, ("x",), levers, True)]
        svc.attribution = lambda job_id, window_id=0: SimpleNamespace(window_id=n, causes=causes)  # type: ignore[method-assign]
        svc._maybe_plan_trial(job_id)

    window(1)
    with svc._exp_lock:  # what _maybe_experiment records when it starts alloc_keep_cache_live
        svc._exp_running[job_id] = threading.Event()
        svc._exp_cause[job_id] = {"allocator"}
        svc._exp_tried.add((job_id, "alloc_keep_cache_live"))
    window(2)  # seen twice, but the live lever is being tried on it
    assert svc.trials.of_workload(wid) == []
    with svc._exp_lock:  # it was decided (not faster, say): the cause remains
        svc._exp_running.pop(job_id)
        svc._exp_cause.pop(job_id)
    window(3)
    (t,) = svc.trials.of_workload(wid)
    assert t.lever == "alloc_expandable_segments" and t.cause == "allocator"


def test_no_launch_trial_on_a_cause_the_live_lever_being_tried_addresses(tmp_path: Path) -> None:
    """Contended (H200, 2026-12-03): while cpu_affinity was tried on host_contention, launch_bound
    (inflated by the same contention, and a cause cpu_affinity addresses) was seen twice and a
    launch trial of cuda_device_max_connections was planned; it ran on the next launches, the
    recurring one among them. Now the causes of the live lever being tried wait for its outcome."""
    import threading
    from types import SimpleNamespace

    from gitmd.analysis.causes import LEVERS, Cause
    from gitmd.levers.host import CpuAffinity

    svc = make_service(tmp_path)
    wid = _recurring(svc, "loop")
    reg = Registration("loop", ("python", "l.py"), "/srv", os.getuid(), os.getgid(), launch_key="loop")
    view, _ = svc.register_job(reg)
    job_id = view.job.id
    svc._steady.add(job_id)

    def window(n: int) -> None:
        causes = [
            Cause("host_contention", 1e6, 0.7, 0.8, ("x",), LEVERS["host_contention"], True),
            Cause("launch_bound", 1e6, 0.25, 0.8, ("x",), LEVERS["launch_bound"], True),
        ]
        svc.attribution = lambda job_id, window_id=0: SimpleNamespace(window_id=n, causes=causes)  # type: ignore[method-assign]
        svc._maybe_plan_trial(job_id)

    window(1)
    with svc._exp_lock:  # what _maybe_experiment records when it starts cpu_affinity
        svc._exp_running[job_id] = threading.Event()
        svc._exp_cause[job_id] = {"host_contention", *CpuAffinity.causes}
    window(2)
    assert svc.trials.of_workload(wid) == []
    with svc._exp_lock:  # decided: what remains of launch_bound may be tried across runs
        svc._exp_running.pop(job_id)
        svc._exp_cause.pop(job_id)
    window(3)
    (t,) = svc.trials.of_workload(wid)
    assert t.cause == "launch_bound"


def test_keep_cache_live_is_tried_only_where_gitmds_hook_reads_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's process whose hook read the keep-cache flag most, asked through each process's
    shim (no window needed); none that read it, or shims that cannot answer, mean no live lever
    (the launch form is tried across runs instead)."""
    from gitmd.levers.base import LeverError
    from gitmd.levers.shim_knobs import AllocKeepCacheLive

    svc = make_service(tmp_path)
    view, _ = svc.register_job(Registration("churn", ("python", "c.py"), "/srv", os.getuid(), os.getgid()))
    job = svc.jobs.get(view.job.id)
    assert svc._keep_cache(job) is None  # no process yet
    assert svc.capture is not None
    monkeypatch.setattr(svc, "_job_pids", lambda job_id: (11, 12, 13))
    monkeypatch.setattr(svc.capture, "ring_paths", lambda job_id: {11: "/r/11", 12: "/r/12"})  # 13: no shim
    reads: dict[int, int | Exception] = {}

    def read(self: AllocKeepCacheLive, target: object) -> tuple[int, int]:
        a = reads[int(self.setting["pid"])]
        if isinstance(a, Exception):
            raise a
        return 0, a

    monkeypatch.setattr(AllocKeepCacheLive, "read", read)
    reads.update({11: 0, 12: 0})
    assert svc._keep_cache(job) is None  # nobody calls empty_cache under the hook
    reads.update({11: 40, 12: 900})
    lever = svc._keep_cache(job)
    assert lever is not None and lever.setting == {"pid": 12}
    reads.update({11: 40, 12: LeverError("no such flag (an older shim)")})
    lever = svc._keep_cache(job)
    assert lever is not None and lever.setting == {"pid": 11}
    reads.update({11: LeverError("timeout"), 12: LeverError("timeout")})
    assert svc._keep_cache(job) is None


def test_window_free_policy_levers_are_tried_from_the_tick_then_dropped(tmp_path: Path) -> None:
    """From the duty tick only the levers that need no window are tried, and no window is counted;
    one whose target never shows (no background co-tenant here) is dropped after LIVE_POLICY_TICKS
    ticks, while a lever that needs a window waits for the windows."""
    from gitmd.service import LIVE_POLICY_TICKS

    live = [
        {"lever": "cotenant_yield", "setting": {"share": 750, "period_ms": 100}},
        {"lever": "stream_priority", "setting": {"priority": -5}},
    ]
    svc = _service_with_policy(tmp_path, live)
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    job_id = view.job.id
    assert [x["lever"] for x in svc._live_pending[job_id][1]] == ["cotenant_yield", "stream_priority"]
    assert job_id not in svc._settling  # the stream needs a window: the early one stays
    for _ in range(LIVE_POLICY_TICKS - 1):
        svc._apply_live_policy(job_id, window_free=True)
    assert len(svc._live_pending[job_id][1]) == 2 and svc._live_pending[job_id][2] == 0
    svc._apply_live_policy(job_id, window_free=True)
    _, left, windows = svc._live_pending[job_id]
    assert [x["lever"] for x in left] == ["stream_priority"] and windows == 0


def test_kept_windows_are_the_newest_of_each_job_and_never_break_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """capture.keep_windows: each analysed window written under <state_dir>/windows/<job>/ in the
    raw trace format (a real H200 window here), root-only, the job's oldest beyond the limit removed;
    a state directory that cannot be written is logged and the window is analysed all the same."""
    import dataclasses

    from gitmd.capture import capture_file

    svc = make_service(tmp_path)
    state = tmp_path / "lib"
    svc.config = dataclasses.replace(
        svc.config,
        daemon=dataclasses.replace(svc.config.daemon, state_dir=state),
        capture=dataclasses.replace(svc.config.capture, keep_windows=3),
    )
    w = capture_file.loads(Path(__file__).resolve().parents[1] / "fixtures" / "planted" / "sync-n3072.w1.npz")
    for i in (1, 2, 3, 10, 11):
        svc._keep_window(dataclasses.replace(w, job_id="j1", window_id=i))
    svc._keep_window(dataclasses.replace(w, job_id="j2", window_id=4))
    d = state / "windows"
    assert sorted(p.name for p in (d / "j1").iterdir()) == ["10.npz", "11.npz", "3.npz"]
    assert [p.name for p in (d / "j2").iterdir()] == ["4.npz"]
    assert (d.stat().st_mode & 0o777) == 0o700 and ((d / "j1").stat().st_mode & 0o777) == 0o700
    back = capture_file.loads(d / "j1" / "11.npz")
    assert back.window_id == 11 and len(back.processes) == len(w.processes)
    (state / "windows" / "j3").write_text("a file where the job's directory would go")
    svc._keep_window(dataclasses.replace(w, job_id="j3", window_id=5))  # logged, not raised
    assert "window 5 of job j3 not kept" in caplog.text


def test_an_ended_jobs_outcome_is_kept_in_the_store_not_in_memory(tmp_path: Path) -> None:
    """A daemon that runs for months keeps only its running jobs in memory: once a job has ended, its
    windows, policy and steps are in its row, its in-memory state is gone, and its view (this
    gitmd's, or the next one's after a restart) still says what its run came to."""
    from gitmd.analysis.steps import JobSteps, StepStats

    svc = _service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(reg)
    job_id = view.job.id
    assert plan.policy_id
    steps = JobSteps(4242, 7, StepStats(True, "", 12, 40, 2.5e6, 2.4e6, 2.7e6, 0.97, 0.95, 3), "sgemm")
    svc._steps[job_id] = steps
    jc = svc.capture.get(job_id) if svc.capture is not None else None
    assert jc is not None
    jc.windows = 7  # windows it had while tracked
    svc._exp_tried.add((job_id, "sched_priority"))
    svc._fingerprinted.add(job_id)
    done = svc.report_exit(job_id, 0)
    assert (done.windows, done.steps, done.policy_id) == (7, steps, plan.policy_id)
    assert job_id not in svc._steps and job_id not in svc._windows_done and job_id not in svc._policies
    assert job_id not in svc._fingerprinted and not [t for t in svc._exp_tried if t[0] == job_id]
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


def test_a_trial_run_that_crashed_is_not_evidence(tmp_path: Path) -> None:
    """The trial goes on: the crashed run spoils its pair instead of reverting the lever for
    "outputs changed: exit status 0, baseline -11"."""
    from gitmd.experiments.equivalence import Check, Contract
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = _recurring(svc, "train")
    contract = Contract((Check("exit_status"),))
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.17) is not None
    _run(svc, contract, None, 1.0, exit_code=-11)  # arm A crashed
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "running" and t.spoiled() == 1 and t.runs[0]["crashed"].startswith("may be gitmd's")
