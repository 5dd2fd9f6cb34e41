"""Launch trials (gitmd/loop/trials.py): a lever tried over a workload's next runs, arm A or B by
run, each measured by its own clock, decided once its runs allow; a promoted one is the next
launch's policy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gitmd.experiments.equivalence import Check, Contract
from gitmd.jobs.launch import SHIM_ENV
from gitmd.jobs.registry import Registration
from gitmd.levers.launch_env import SiteReport
from gitmd.levers.registry import make
from tests.unit.loop.helpers import make_service, recurring, run_train, set_config


def test_launch_trial_across_runs_promotes_and_the_next_launch_gets_the_policy(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    for s in (10.0, 10.2):  # two plain runs: the workload's run-to-run spread is measured
        run_train(svc, contract, s, 1.0)
    # as a window's attribution plans it: fp32 GEMMs cost 90% of the run
    t = svc.trials.plan(wid, make("tf32_override"), "fp32_gemm", 0.9)
    assert t is not None and svc.trials.plan(wid, make("cpu_threads"), "x") is None  # one at a time
    arms = []
    for i in range(2):  # 5x faster runs in the first pair, far beyond 2% spread: decided early
        _, arm, env = run_train(svc, contract, 2.0 if i == 1 else 10.0, 1.001 if i == 1 else 1.0)
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
    _, arm, env = run_train(svc, contract, 2.0, 1.0)
    assert arm == "-" and env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"  # at launch, no trial


def test_a_launch_trial_with_a_modest_gain_takes_its_full_rounds(tmp_path: Path) -> None:
    """1.25x is within reach of the drift between runs: no early stop, AB BA AB pairs, then the
    paired bootstrap decides."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    run_train(svc, contract, 10.0, 1.0)  # the run it was planned on: a line that ran here opens pairs
    assert svc.trials.plan(wid, make("cpu_threads"), "host_contention") is not None
    arms = []
    for i in range(6):
        arm_b = i in (1, 2, 5)  # the order the trial hands out: A B, B A, A B
        _, arm, _ = run_train(svc, contract, 8.0 if arm_b else 10.0, 1.0)
        arms.append(arm)
        if i < 5:
            assert svc.trials.of_workload(wid)[0].state == "running"
    assert arms == ["A", "B", "B", "A", "A", "B"]
    (done,) = svc.trials.of_workload(wid)
    assert done.state == "promoted" and done.decision["pairs"] == 3 and done.decision["low"] > 1.2


def test_launch_trial_with_changed_outputs_or_no_steps_is_not_promoted(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-4)))
    run_train(svc, contract, 10.0, 1.0)  # the run it was planned on: a line that ran here opens pairs
    svc.trials.plan(wid, make("tf32_override"), "fp32_gemm")
    for i in range(6):
        arm_b = i in (1, 2, 5)
        run_train(svc, contract, 2.0 if arm_b else 10.0, 1.01 if arm_b else 1.0)  # faster, loss moved 1%
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "reverted" and "outputs changed" in t.decision["reason"]
    assert svc.workload(wid).policies == ()

    svc.trials.plan(wid, make("alloc_expandable_segments"), "allocator")
    for _ in range(6):
        run_train(svc, contract, None, 1.0)  # runs that never initialised CUDA under the shim: no length
    t2 = svc.trials.of_workload(wid)[-1]
    assert t2.state == "abandoned" and "no length" in t2.decision["reason"]


def test_a_launch_trial_as_the_api_shows_it(tmp_path: Path) -> None:
    from gitmd.api.convert import trial_to_pb

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
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


def test_runs_a_restarted_gitmd_cannot_measure_are_closed_without_a_step_time(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
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


def test_a_trial_run_that_crashed_is_not_evidence(tmp_path: Path) -> None:
    """The trial goes on: the crashed run spoils its pair instead of reverting the lever for
    "outputs changed: exit status 0, baseline -11"."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"),))
    run_train(svc, contract, 10.0, 1.0)  # the run it was planned on: a line that ran here opens pairs
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.17) is not None
    run_train(svc, contract, None, 1.0, exit_code=-11)  # arm A crashed
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "running" and t.spoiled() == 1 and t.runs[0]["crashed"].startswith("may be gitmd's")


def test_a_live_trial_its_job_ended_is_continued_by_the_next_run(tmp_path: Path) -> None:
    """Convergence issue, item 1: a recurring job too short for a whole live trial kept ending it
    "abandoned (job ended)", and every next run started from zero. The pairs it measured now stay
    evidence about the workload: the next run's trial of the same lever continues from them and
    decides on all of them; a trial is continued once, and a continued one ending early again is
    itself continued with everything it carried."""
    import subprocess
    import sys

    from gitmd.experiments.live import ExperimentStore, LiveExperiment, Measurement
    from gitmd.jobs.registry import Registration
    from gitmd.levers.base import Target
    from gitmd.levers.host import CpuAffinity

    svc = make_service(tmp_path)
    exps = ExperimentStore(svc.jobs.store)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    cpu = sorted(os.sched_getaffinity(0))[0]

    def run_of_workload() -> str:
        view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", os.getuid(), os.getgid()))
        svc.jobs.set_workload(view.job.id, "w1")
        return view.job.id

    def trial(job_id: str, steps: list[float | None], earlier: list) -> LiveExperiment:  # type: ignore[type-arg]
        seq = iter([Measurement(i + 1, s) if s is not None else None for i, s in enumerate(steps)])
        return LiveExperiment(
            exps, svc.interventions, job_id, CpuAffinity(cpus=[cpu]), "host_contention",
            target=lambda: Target(pids=(child.pid,)), measure=lambda: next(seq), rounds=4, settle_s=0,
            earlier=earlier,
        )  # fmt: skip

    try:
        first = trial(run_of_workload(), [10.0, 5.0, None], [])  # one pair (A, B), then its job ended
        d = first.run()
        assert not d.promote and "abandoned" in d.reason
        assert [e.id for e in exps.resumable("w1", "cpu_affinity")] == [first.exp.id]
        assert exps.resumable("w1", "sched_priority") == [] and exps.resumable("other", "cpu_affinity") == []
        assert exps.workload_levers("w1") == {"cpu_affinity": "resumable"}  # its next run is observed
        # the second run: one more pair (B, A), then it ended too: it carries both pairs on
        second = trial(run_of_workload(), [5.1, 10.2, None], exps.resumable("w1", "cpu_affinity"))
        assert not second.run().promote
        assert exps.get(first.exp.id).decision["continued_in"] == second.exp.id
        assert [e.id for e in exps.resumable("w1", "cpu_affinity")] == [second.exp.id]
        assert not exps.stalled("w1", "cpu_affinity")  # each run added a pair: worth observing the next
        # the third run measures the last two pairs and decides on all four
        third = trial(run_of_workload(), [9.9, 4.9, 5.05, 10.1], exps.resumable("w1", "cpu_affinity"))
        d = third.run()
        assert d.promote and d.interval is not None and d.interval.pairs == 4, d.reason
        assert "2 pair(s) from earlier runs" in d.reason and 1.8 < d.interval.speedup < 2.2
        assert exps.resumable("w1", "cpu_affinity") == []  # decided: nothing left to continue
        assert exps.get(third.exp.id).decision["continues"] == [second.exp.id]
        assert exps.workload_levers("w1") == {}  # kept: a policy now, nothing to continue or avoid
        # a lever decided and not kept on a run of the workload is not tried on it again
        fourth = trial(run_of_workload(), [5.0, 10.0, 10.1, 5.0], [])
        assert not fourth.run().promote and exps.get(fourth.exp.id).state == "reverted"
        assert exps.workload_levers("w1") == {"cpu_affinity": "reverted"}

        # runs too short for a pair (flax's 10-s training, H200 2026-12-04): one that ended after its
        # A window, then one that ended before any; the trial stays resumable, but stalled: its
        # continuing is no reason to observe the next run (Observe.rests)
        def run_of(workload: str) -> str:
            job_id = run_of_workload()
            svc.jobs.set_workload(job_id, workload)
            return job_id

        trial(run_of("w2"), [10.0, None], []).run()
        assert not exps.stalled("w2", "cpu_affinity")  # one run alone says nothing yet
        trial(run_of("w2"), [None], exps.resumable("w2", "cpu_affinity")).run()
        assert exps.workload_levers("w2") == {"cpu_affinity": "resumable"} and exps.stalled(
            "w2", "cpu_affinity"
        )
    finally:
        child.kill()
        child.wait()


def test_a_runs_exploration_stops_at_its_budget_and_the_next_run_continues(tmp_path: Path) -> None:
    """Convergence issue, item 3: a live CPU trial cost a run 49%. Its losing treatment windows are
    now held to experiments.run_cost_cap (2%) of the run so far: the trial that would go beyond stops
    (abandoned: its pairs are the workload's, the next run continues them), and no further trial
    starts on that run; a faster treatment costs nothing."""
    import dataclasses
    import subprocess
    import sys
    import time

    from gitmd.experiments.live import LiveExperiment, Measurement
    from gitmd.jobs.registry import Registration
    from gitmd.levers.base import Target
    from gitmd.levers.host import CpuAffinity
    from gitmd.loop.cost import exploration_left

    svc = make_service(tmp_path)
    arm_s = svc.config.capture.window_duration_s + svc.config.experiments.settle_s
    view, _ = svc.register_job(Registration("j", ("python", "j.py"), "/srv", os.getuid(), os.getgid()))
    job_id = view.job.id
    with svc.jobs.store.transaction() as db:  # the run began 100 s ago: 2 s of budget
        db.execute("UPDATE jobs SET created_ns = ? WHERE id = ?", [time.time_ns() - 100 * 10**9, job_id])
    d = svc.loop.d
    assert exploration_left(d, job_id) == ""
    assert exploration_left(d, job_id, [10.0], [8.0]) == ""  # faster: costs nothing
    # a B window twice as slow: it and one more like it would cost 2 x arm_s x 0.5 = 2.5 s > 2 s
    why = exploration_left(d, job_id, [10.0], [20.0])
    assert "exploration budget is spent" in why and "run_cost_cap (2%)" in why
    # an ended trial's losing arms count for the rest of the run
    e = svc.experiments.create(job_id, CpuAffinity(cpus=[0]), "host_contention")
    e.arms = [{"arm": "A", "step_ms": 10.0}, {"arm": "B", "step_ms": 40.0}]
    e.state = "reverted"
    svc.experiments.update(e)
    assert abs(arm_s * 0.75 - 1.875) < 1e-9 and exploration_left(d, job_id) == ""  # 1.875 s of 2 s
    e.arms += [{"arm": "B", "step_ms": 40.0}]
    svc.experiments.update(e)
    assert "exploration budget is spent" in exploration_left(d, job_id)
    svc.loop.choose.not_explorable = lambda job: ""  # type: ignore[method-assign]
    assert "exploration budget is spent" in svc.loop.choose.live(job_id)  # no new trial on this run
    # the loop's check during a trial marks the run: no other live trial starts on it
    assert "exploration budget" in svc.loop.trials._budget(job_id, [10.0], [20.0])
    assert "exploration budget" in svc.states.of(job_id).spent
    off = dataclasses.replace(svc.config.experiments, run_cost_cap=0.0)
    set_config(svc, dataclasses.replace(svc.config, experiments=off))
    assert exploration_left(d, job_id) == ""
    # the engine: a budget that says stop after the first pair ends the trial abandoned, resumable
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        svc.jobs.set_workload(job_id, "w9")
        # two pairs (a loss after one pair is for clearly_slower to judge at two), not clearly slower
        seq = iter([Measurement(1, 10.0), Measurement(2, 10.6), Measurement(3, 9.9), Measurement(4, 10.0)])
        asked: list[tuple[list[float], list[float]]] = []

        def budget(a: list[float], b: list[float]) -> str:
            asked.append((list(a), list(b)))
            return "this run's exploration budget is spent (test)"

        cpu = sorted(os.sched_getaffinity(0))[0]
        x = LiveExperiment(
            svc.experiments, svc.interventions, job_id, CpuAffinity(cpus=[cpu]),
            "host_contention", target=lambda: Target(pids=(child.pid,)), measure=lambda: next(seq), rounds=4,
            settle_s=0, budget=budget,
        )  # fmt: skip
        dec = x.run()
        assert not dec.promote and "exploration budget" in dec.reason
        assert asked == [([10.0, 10.0], [10.6, 9.9])]
        assert svc.experiments.get(x.exp.id).state == "abandoned"
        assert [y.id for y in svc.experiments.resumable("w9", "cpu_affinity")] == [x.exp.id]
        assert svc.interventions.in_force("cpu_affinity") == []  # the job left as it was
    finally:
        child.kill()
        child.wait()


def test_a_launch_trials_runs_go_without_the_shim_timed_by_their_launcher(tmp_path: Path) -> None:
    """A trial's run gets no window, and CUPTI merely loaded cost a launch-bound program 14-30% of
    its GPU time (H200 2026-12-04): a run whose launcher is known (gitmctl run times it) goes without
    the shim, both arms alike, and is measured on the launcher's clock, exec to exit, against plain
    runs on that clock. The policy it promotes says which clock decided it."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    reg = Registration(
        "train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train",
        launcher_pid=os.getpid(), contract=contract,
    )  # fmt: skip

    def run(wall_s: float, loss: float) -> tuple[str, dict[str, str], bool]:
        view, plan = svc.register_job(reg)
        assert svc.jobs.get(view.job.id).phase == "trial run"
        svc.loop.exits.run_s = lambda job_id: None  # type: ignore[method-assign]  # no shim: no ring
        svc.report_exit(view.job.id, 0, {r"loss=(\S+)": [loss]}, wall_s=wall_s)
        arm = plan.trial.split("arm ")[1][0] if plan.trial else "-"
        return arm, plan.env, plan.capture

    # an earlier observed run of the workload had these frameworks mapped (Observe.record_frameworks)
    first, _ = svc.register_job(Registration("train", ("python", "train.py"), "/srv", os.getuid(),
                                             os.getgid(), launch_key="train"))  # fmt: skip
    svc.jobs.set_frameworks(first.job.id, {"torch": "2.11.0+cu130"})
    svc.report_exit(first.job.id, 0)
    t = svc.trials.plan(wid, make("tf32_override"), "fp32_gemm", 0.9)
    assert t is not None
    seen = []
    for i in range(4):  # two pairs that agree on 5x decide it (runs.decide_trial's early stop)
        arm_b = i in (1, 2)  # the order the trial hands out: A B, B A
        arm, env, capture = run(2.0 if arm_b else 10.0 + 0.1 * i, 1.0)
        seen.append(arm)
        assert not capture and not set(SHIM_ENV) & set(env)  # no shim, no CUPTI, in either arm
        assert (env.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1") == (arm == "B")
    assert seen == ["A", "B", "B", "A"]
    (done,) = svc.trials.of_workload(wid)
    assert {r["clock"] for r in done.runs} == {"wall_s"}
    assert done.state == "promoted" and done.decision["low"] > 4, done.decision
    (policy,) = svc.workload(wid).policies
    assert policy.evidence["metric"].startswith("wall_s: the launcher's clock")
    assert policy.evidence["frameworks"] == {"torch": "2.11.0+cu130"}  # what it was learned with
    # each run's cost record names its arm (the trial is looked up before the run lets go of it); a
    # B run is no plain run for the next trial's spread or baseline
    import json as _json

    costs = [_json.loads(svc.jobs.get(r["job_id"]).cost or "{}") for r in done.runs]
    assert [c.get("arm") for c in costs] == ["A", "B", "B", "A"]
    assert all(c["trial_arm_s"] == 0.0 for c in costs)  # B was faster than the plain runs
    assert 2.0 not in svc.jobs.plain_runs_s(
        svc.jobs.get(done.runs[0]["job_id"]).launch_key, set(), clock="wall_s"
    )


def test_a_launch_trials_runs_are_timed_from_their_cuda_start_where_the_clock_library_is(
    tmp_path: Path,
) -> None:
    """With gitmd's clock library beside the shim, a trial's runs still go without the shim (no
    CUPTI) but carry the library in its place, and are measured from their CUDA start to their exit
    as their launcher read the stamps ("cuda_s"), not exec to exit: the interpreter's start and
    imports are out of both arms. Here the runs' starts before CUDA vary by 6 s (as timm's did by
    up to 4.5 s on the H200) and hide a 1.25x lever on the wall clock; on cuda_s its three pairs
    decide it. A B run's cost is measured on that clock too."""
    import json as _json

    svc = make_service(tmp_path)
    (tmp_path / "libgitm_clock.so").write_bytes(b"\x7fELF")  # beside the helper's shim
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"),))
    reg = Registration(
        "train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train",
        launcher_pid=os.getpid(), contract=contract,
    )  # fmt: skip
    svc.loop.exits.run_s = lambda job_id: None  # type: ignore[method-assign]  # no shim: no ring
    first, _ = svc.register_job(Registration("train", ("python", "train.py"), "/srv", os.getuid(),
                                             os.getgid(), launch_key="train"))  # fmt: skip
    svc.report_exit(first.job.id, 0, wall_s=16.0, cuda_s=8.0)  # the run it was planned on
    assert svc.trials.plan(wid, make("cpu_threads"), "host_contention", 0.5) is not None
    starts = [9.0, 3.0, 6.0, 4.0, 8.0, 2.5]  # seconds before CUDA: imports, a cold cache
    arms = []
    for i, before in enumerate(starts):
        view, plan = svc.register_job(reg)
        arm = plan.trial.split("arm ")[1][0]
        arms.append(arm)
        assert not plan.capture and plan.env["CUDA_INJECTION64_PATH"] == str(tmp_path / "libgitm_clock.so")
        assert plan.env["GITM_CLOCK"] == "1" and not {"GITM_JOB_DIR", "GITM_GUARD"} & set(plan.env)
        cuda = (6.4 if arm == "B" else 8.0) + 0.02 * i
        svc.report_exit(view.job.id, 0, {}, wall_s=before + cuda, cuda_s=cuda)
    assert arms == ["A", "B", "B", "A", "A", "B"]
    (done,) = svc.trials.of_workload(wid)
    assert {r["clock"] for r in done.runs} == {"cuda_s"}
    assert done.state == "promoted" and 1.2 < done.decision["low"] < 1.25 < done.decision["high"], (
        done.decision
    )
    (policy,) = svc.workload(wid).policies
    assert policy.evidence["metric"].startswith("cuda_s: the run's own clock")
    walls = [before + (6.4 if a == "B" else 8.0) for before, a in zip(starts, arms, strict=True)]
    a_wall = [w for w, a in zip(walls, arms, strict=True) if a == "A"]
    b_wall = [w for w, a in zip(walls, arms, strict=True) if a == "B"]
    assert max(b_wall) > min(a_wall)  # on the launcher's clock a B run was slower than an A run
    costs = [_json.loads(svc.jobs.get(r["job_id"]).cost or "{}") for r in done.runs]
    assert all(c["trial_arm_s"] == 0.0 for c in costs)  # each B faster than the plain CUDA runs
    key = svc.jobs.get(done.runs[0]["job_id"]).launch_key
    assert sorted(svc.jobs.plain_runs_s(key, set(), clock="cuda_s", runs=9)) == [
        8.0,
        8.06,
        8.08,
    ]  # the A arms


def test_a_run_whose_cuda_part_cannot_be_its_own_is_timed_by_its_launcher(tmp_path: Path) -> None:
    """A CUDA part longer than the run's exec-to-exit time is no measurement: the run is timed by
    its launcher, and its row holds no length from CUDA's start."""
    svc = make_service(tmp_path)
    (tmp_path / "libgitm_clock.so").write_bytes(b"\x7fELF")
    wid = recurring(svc, "train")
    reg = Registration(
        "train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train",
        launcher_pid=os.getpid(), contract=Contract((Check("exit_status"),)),
    )  # fmt: skip
    svc.loop.exits.run_s = lambda job_id: None  # type: ignore[method-assign]
    first, _ = svc.register_job(Registration("train", ("python", "train.py"), "/srv", os.getuid(),
                                             os.getgid(), launch_key="train"))  # fmt: skip
    svc.report_exit(first.job.id, 0, wall_s=16.0)
    svc.trials.plan(wid, make("cpu_threads"), "host_contention", 0.5)
    view, plan = svc.register_job(reg)
    assert plan.trial
    svc.report_exit(view.job.id, 0, {}, wall_s=5.0, cuda_s=7.0)
    (t,) = svc.trials.of_workload(wid)
    assert t.runs[0]["clock"] == "wall_s" and t.runs[0]["run_s"] == 5.0
    assert not svc.jobs.get(view.job.id).run_s


def test_a_launch_trial_pairs_runs_of_one_command_line_only(tmp_path: Path) -> None:
    """One workload, two command lines: `train.py --steps 300` (30 s) and `--steps 100` (10 s),
    launched in turn under one stated key. A lever that changes nothing, its arms handed to both
    lines in this order, paired a 30-s A with a 10-s B twice: "3.000x, 95% 3.000-3.000, decided after
    2 of 3 pairs", promoted and applied at every later launch (e42b409). Each pair is now two runs of
    one line (pairs of either line), so it is decided on like against like: not promoted. A B arm's
    cost is measured against its own line's plain runs (the script's 10-s runs made a 30-s arm cost
    20 s). A line that changes every run (a seed) never opens a pair (only a line that ran here
    before does): its trial is abandoned with no arm handed out."""
    import json as _json

    from gitmd.experiments.runs import MAX_FRESH

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"),))
    long_line, short_line = ("--steps", "300"), ("--steps", "100")
    run_train(svc, contract, 30.0, 1.0, args=long_line)  # the observed run that planned it
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.9, 10.0)
    seen = []
    for i in range(12):
        args = [long_line, short_line, short_line, long_line, long_line, short_line][i % 6]
        _, arm, env = run_train(svc, contract, 30.0 if args == long_line else 10.0, 1.0, args=args)
        seen.append((args[1], arm))
        assert ("CUDA_DEVICE_MAX_CONNECTIONS" in env) == (arm == "B")
    assert [a for _, a in seen] == ["A", "-", "-", "B", "B", "-", "A", "A", "B", "-", "-", "-"], seen
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "reverted" and t.decision["pairs"] == 3 and t.decision["speedup"] == 1.0, t.decision
    assert [(a["run_s"], b["run_s"]) for a, b in t.pairs()] == [(30.0, 30.0), (30.0, 30.0), (10.0, 10.0)]
    b_runs = [r["job_id"] for r in t.runs if r["arm"] == "B"]
    assert all(_json.loads(svc.jobs.get(j).cost)["trial_arm_s"] == 0.0 for j in b_runs)

    # a command line that changes every run (a seed): no line has run before, so no pair opens
    assert svc.trials.plan(wid, make("alloc_expandable_segments"), "allocator", 0.5, 2.0)
    runs = 0
    while svc.trials.of_workload(wid)[-1].state == "running":
        runs += 1
        run_train(svc, contract, 10.0, 1.0, args=("--seed", str(runs)))
        assert runs < 100
    t2 = svc.trials.of_workload(wid)[-1]
    assert t2.state == "abandoned" and "no pair could be made" in t2.decision["reason"], t2.decision
    assert runs == MAX_FRESH and t2.runs == []  # no arm was ever handed out: nothing it cost


def test_a_trial_another_runs_end_decided_meanwhile_is_kept_once(tmp_path: Path) -> None:
    """Two trial runs ending at once both decide the trial: only the one whose end() ended it
    records the experiment and keeps the policy (a review stored two validated policies)."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
    run_train(svc, contract, 10.0, 1.0)
    assert svc.trials.plan(wid, make("tf32_override"), "fp32_gemm", 0.9) is not None
    for s in (10.0, 2.0, 2.0):  # A B B: the fourth run completes two pairs that agree on 5x
        run_train(svc, contract, s, 1.0)
    ended = svc.trials.end
    svc.trials.end = lambda t, state, decision: False  # type: ignore[method-assign]  # ended meanwhile
    run_train(svc, contract, 10.0, 1.0)
    svc.trials.end = ended  # type: ignore[method-assign]
    assert svc.workload(wid).policies == ()
    assert all(svc.experiments.of_job(j.id) == [] for j in svc.jobs.list(include_exited=True))


def test_a_trial_no_run_can_take_an_arm_in_is_abandoned_where_its_runs_meet_it(tmp_path: Path) -> None:
    """`python train.py --seed N` with no stated key: no launch is sure of the workload (each line
    is new), so none reaches the trial's arms; each run joins the workload only once fingerprinted.
    The trial got no run, was never decided nor abandoned, and refused every other trial of the
    workload for good (a review). Once MAX_FRESH of its runs have come since its latest arm, the
    next of them that meets it (the trial planning after a window) abandons it."""
    from gitmd.experiments.runs import MAX_FRESH

    svc = make_service(tmp_path)
    t = svc.trials.plan("w-seed", make("cuda_device_max_connections"), "launch_bound", 0.5)
    assert t is not None
    jobs = []
    for i in range(MAX_FRESH):
        reg = Registration("t", ("python", "t.py", "--seed", str(i)), "/srv", os.getuid(), os.getgid())
        view, plan = svc.register_job(reg)
        assert not plan.trial and view.job.workload_id == ""  # not sure: no arm, no workload yet
        svc.jobs.set_workload(view.job.id, "w-seed")  # its fingerprint matched the workload
        jobs.append(view.job.id)
        if i < MAX_FRESH - 1:
            svc.loop.choose.launch(view.job.id)
            assert svc.trials.running("w-seed") is not None  # fewer than MAX_FRESH runs since: it waits
    svc.loop.choose.launch(jobs[-1])
    (done,) = svc.trials.of_workload("w-seed")
    assert done.state == "abandoned" and f"{MAX_FRESH} runs of the workload came" in done.decision["reason"]
    assert svc.trials.plan("w-seed", make("alloc_expandable_segments"), "allocator") is not None  # the next


def test_a_recurring_line_whose_runs_overlap_opens_pairs(tmp_path: Path) -> None:
    """A line launched again while its earlier run still runs (a frequent job, or many slots of one
    command) was launched before: it opens a pair (counting only ended runs, every launch was
    "new" and the trial was abandoned, its lever used up)."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    svc.register_job(reg)  # its first run: still running
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.5) is not None
    arms = []
    for _ in range(3):
        _, plan = svc.register_job(reg)
        arms.append(plan.trial.split("arm ")[1][0] if plan.trial else "-")
    assert arms == ["A", "B", "B"], arms


def test_b_runs_its_site_knob_changed_nothing_in_end_the_trial_as_not_applicable(tmp_path: Path) -> None:
    """More DataLoader workers for a program that builds no DataLoader: gitmd's sitecustomize loaded
    in the B runs and its knob changed nothing (the launcher's report). The lever cannot act in this
    program, so the trial ends once two clean B runs agree instead of spending its rounds on a no-op;
    the workload is not offered the lever again. A report that the knob acted, no report, or a B run
    that was killed or failed before the program could reach the knob (a DataLoader built late)
    leave the trial to its pairs: giving a lever up is for good."""
    contract = Contract((Check("exit_status"),))
    noop = SiteReport(True, ())

    def trial(where: str) -> tuple[Any, str]:
        (tmp_path / where).mkdir()
        svc = make_service(tmp_path / where)
        wid = recurring(svc, "train")
        run_train(svc, contract, 10.0, 1.0)  # the run it was planned on: a line that ran here opens pairs
        assert svc.trials.plan(wid, make("dataloader_workers"), "launch_bound", 0.5) is not None
        assert run_train(svc, contract, 10.0, 1.0)[1] == "A"
        return svc, wid

    svc, wid = trial("acted")
    acted = SiteReport(True, ("GITMD_DATALOADER_WORKERS",))
    _, arm, env = run_train(svc, contract, 9.9, 1.0, site=acted)  # it acted: the trial goes on
    assert arm == "B" and env["GITMD_DATALOADER_WORKERS"] == "4" and env["GITM_SITE"]
    _, arm, _ = run_train(svc, contract, 10.1, 1.0, site=noop)
    assert arm == "B" and svc.trials.of_workload(wid)[0].state == "running"
    (t,) = svc.trials.of_workload(wid)
    assert [r.get("site") for r in t.runs][1:] == [
        {"loaded": True, "acted": ["GITMD_DATALOADER_WORKERS"]},
        {"loaded": True, "acted": []},
    ]

    svc, wid = trial("killed")  # a B run stopped before the program built its DataLoader
    assert run_train(svc, contract, 3.0, 1.0, exit_code=-15, site=noop)[1] == "B"
    (t,) = svc.trials.of_workload(wid)  # its exit status is no contract kept: reverted, never "no-op"
    assert t.state == "reverted" and "not applicable" not in t.decision["reason"], t.decision

    svc, wid = trial("no length")  # a B run with no length by its clock is no evidence of anything
    assert run_train(svc, contract, None, 1.0, site=noop)[1] == "B"
    assert run_train(svc, contract, 10.0, 1.0, site=noop)[1] == "B"
    assert svc.trials.of_workload(wid)[0].state == "running"  # one clean B run: not yet

    svc, wid = trial("unreported")
    run_train(svc, contract, 10.0, 1.0, site=None)
    run_train(svc, contract, 10.0, 1.0, site=noop)
    assert svc.trials.of_workload(wid)[0].state == "running"

    svc, wid = trial("noop")  # a program the knob never reaches
    first, arm, _ = run_train(svc, contract, 10.0, 1.0, site=noop)
    assert arm == "B" and svc.trials.of_workload(wid)[0].state == "running"  # one run is not enough
    second, arm, _ = run_train(svc, contract, 10.0, 1.0, site=noop)
    (t2,) = svc.trials.of_workload(wid)
    assert arm == "B" and t2.state == "abandoned", t2
    reason = t2.decision["reason"]
    assert reason.startswith(f"not applicable: in its B runs {first}, {second}, gitmd's sitecustomize")
    assert "GITMD_DATALOADER_WORKERS changed nothing" in reason
    assert svc.workload(wid).policies == ()
    _, arm, env = run_train(svc, contract, 10.0, 1.0, site=noop)
    assert arm == "-" and "GITMD_DATALOADER_WORKERS" not in env  # the next run goes as it is


def test_a_lever_slower_in_its_first_pair_stops_on_the_spread_of_its_lines_observed_runs(
    tmp_path: Path,
) -> None:
    """A program's runs so far were all observed (the shim in them), so none is a plain run on the
    launcher's clock the trial's runs are measured by: no spread, and a lever 40% slower in its first
    pair went on to a second B run at once (A B B A; the H200's mobilenet, 2026-12-05: 31% slower, no
    stop). The line's observed runs, timed by the same launcher, give a spread wide enough for a stop
    (gitmd's own cost in some of them only widens it): stopped after one pair, not kept."""
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    contract = Contract((Check("exit_status"),))
    reg = Registration(
        "train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train",
        launcher_pid=os.getpid(), contract=contract,
    )  # fmt: skip

    def run(wall_s: float) -> tuple[str, bool]:
        view, plan = svc.register_job(reg)
        svc.loop.exits.run_s = lambda job_id: None  # type: ignore[method-assign]
        svc.report_exit(view.job.id, 0, {}, wall_s=wall_s)
        return (plan.trial.split("arm ")[1][0] if plan.trial else "-"), plan.capture

    observed = [run(w) for w in (10.0, 10.3)]
    assert [c for _, c in observed] == [True, True]  # both had the shim
    key = svc.jobs.list(include_exited=True)[0].launch_key
    assert svc.jobs.plain_runs_s(key, set(), clock="wall_s") == []  # no plain run on that clock
    assert sorted(svc.jobs.plain_runs_s(key, set(), clock="wall_s", with_shim=True)) == [10.0, 10.3]
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.5) is not None
    assert run(10.1)[0] == "A" and run(14.0)[0] == "B"
    (t,) = svc.trials.of_workload(wid)
    assert t.state == "reverted" and "stopped after 1 of 3 pairs" in t.decision["reason"], t.decision
    assert run(10.0)[0] == "-"  # no second B run


def test_what_gives_a_lever_up_as_not_applicable() -> None:
    """not_applicable on a trial's runs as recorded: two clean B runs of one command line, each with
    PyTorch adjusted and the knob changing nothing, and no B run saying otherwise. Not: a failed or
    killed or crashed B run among the two, a B run still running, a B run of another line whose knob
    acted, two agreeing B runs of two different lines, or a stored report this gitmd cannot read."""
    from gitmd.experiments.runs import LaunchTrial
    from gitmd.loop.trials import not_applicable

    noop = {"loaded": True, "acted": []}

    def b(job: str, line: str = "L", exit_code: int = 0, **kw: object) -> dict[str, object]:
        return {"job_id": job, "arm": "B", "done": True, "exit_code": exit_code, "run_s": 10.0,
                "command": line, "site": noop, **kw}  # fmt: skip

    def of(*runs: dict[str, object]) -> str:
        a = {"job_id": "a", "arm": "A", "done": True, "exit_code": 0, "run_s": 10.0, "command": "L"}
        return not_applicable(
            LaunchTrial(1, "w", "dataloader_workers", {}, "launch_bound", "running", [a, *runs])
        )

    assert of(b("b1"), b("b2")).startswith("in its B runs b1, b2, gitmd's sitecustomize")
    assert of(b("b1")) == ""  # one is not enough
    assert of(b("b1"), b("b2", exit_code=1)) == ""  # failed: says nothing
    assert of(b("b1"), b("b2", exit_code=-15)) == ""  # stopped
    assert of(b("b1"), b("b2", crashed="SIGSEGV")) == ""
    assert of(b("b1"), b("b2", run_s=None)) == ""  # no length
    assert of(b("b1"), b("b2"), b("b3", done=False)) == ""  # one still running may yet say it acted
    assert (
        of(b("b1"), b("b2"), b("b3", line="M", site={"loaded": True, "acted": ["GITMD_DATALOADER_WORKERS"]}))
        == ""
    )
    assert of(b("b1"), b("b2", line="M")) == ""  # one each of two lines
    assert of(b("b1"), b("b2", line="M"), b("b3")).startswith("in its B runs b1, b3,")
    assert of(b("b1"), b("b2", site={"loaded": "x", "acted": ["PATH"]})) == ""  # unreadable: unknown
    assert of(b("b1"), b("b2", site=None)) == ""
    assert of(b("b1"), b("b2", site={"loaded": False, "acted": []})) == ""  # PyTorch never adjusted
