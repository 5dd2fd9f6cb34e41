"""A policy the fleet brought is confirmed on this node's own runs (fleet issue, item 3): applied
at launch, a launch trial of it (arm A without it) on the workload's first runs here decides with
the same paired rule as any lever. Held: this node's own evidence now. Slower or outputs changed:
reverted here, the fleet told it is suspect. Between a policy learned here and one from the fleet,
this node's own evidence wins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.experiments.equivalence import Check, Contract
from gitmd.store.library import Policy
from tests.unit.loop.helpers import make_service, recurring, run_train

ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
FLEET = {"source": "fleet", "node": "a", "origin": "a:7", "fleet_seq": 3, "driver": "580.159.04"}
CONTRACT = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))


def outbox(svc: object) -> list[tuple[str, int]]:
    with svc.library.store.reading() as db:  # type: ignore[attr-defined]
        return [tuple(r) for r in db.conn.execute("SELECT kind, policy_id FROM fleet_outbox ORDER BY id")]


def runs(svc: object, b_s: float, n: int = 6) -> list[tuple[str, dict[str, str]]]:
    got = []
    for _ in range(n):
        trial = svc.trials.of_workload("00c0ffee0003")  # type: ignore[attr-defined]
        arm = trial[-1].next_arm() if trial and trial[-1].state == "running" else "-"
        _, arm, env = run_train(svc, CONTRACT, b_s if arm == "B" else 10.0, 1.0)
        got.append((arm, env))
    return got


def fleet_policy(svc: object, speedup: float = 1.25, ci: tuple[float, float] = (1.1, 1.4)) -> Policy:
    svc.library.fleet_outbox = True  # type: ignore[attr-defined]
    lib = svc.library  # type: ignore[attr-defined]
    return lib.add_policy("00c0ffee0003", ENV, "validated", speedup, ci, dict(FLEET))  # type: ignore[no-any-return]


def test_a_fleet_policy_that_holds_here_is_confirmed_and_kept(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    recurring(svc, "train")
    p = fleet_policy(svc)
    run_train(svc, CONTRACT, 10.0, 1.0)  # its first run here: a line not run here before opens no pair
    assert p.trust == 1 and outbox(svc) == []  # what the fleet sent is not sent back
    got = runs(svc, 8.0)
    # A B, B A, A B: the A runs ran without the policy, the B runs with it
    assert [a for a, _ in got] == ["A", "B", "B", "A", "A", "B"]
    assert all(("CUDA_DEVICE_MAX_CONNECTIONS" in env) == (arm == "B") for arm, env in got)
    (t,) = svc.trials.of_workload("00c0ffee0003")
    assert t.lever == "policy_env" and t.state == "promoted" and t.cause == "fleet: a"
    held = svc.library.get_policy(p.id)
    assert held.status == "validated" and held.trust == 2
    c = held.evidence["confirmed"]
    assert c["held"] and not c["suspect"] and c["pairs"] == 3 and c["launch_trial"] == t.id
    assert outbox(svc) == [("confirm", p.id)]  # the fleet hears how it held here
    assert svc.workload("00c0ffee0003").policies == (held,)  # no second policy: the same one, confirmed
    ((arm, env),) = runs(svc, 8.0, 1)
    assert arm == "-" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"  # at launch, no trial again


def test_a_fleet_policy_that_slows_the_job_here_is_reverted_here_and_suspect(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    recurring(svc, "train")
    p = fleet_policy(svc)
    run_train(svc, CONTRACT, 10.0, 1.0)  # its first run here: a line not run here before opens no pair
    got = runs(svc, 12.0, 4)  # 20% slower with it: stopped after two pairs (clearly slower)
    assert [a for a, _ in got][:4] == ["A", "B", "B", "A"]
    (t,) = svc.trials.of_workload("00c0ffee0003")
    assert t.state == "reverted" and "slower" in t.decision["reason"]
    gone = svc.library.get_policy(p.id)
    assert gone.status == "reverted" and gone.evidence["confirmed"]["suspect"]
    assert outbox(svc) == [("confirm", p.id)]  # the confirmation, not a revert: this node's alone
    ((arm, env),) = runs(svc, 12.0, 1)
    assert arm == "-" and "CUDA_DEVICE_MAX_CONNECTIONS" not in env


def test_this_nodes_own_evidence_wins_over_the_fleets(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    recurring(svc, "train")
    mine = svc.library.add_policy("00c0ffee0003", {"OMP_NUM_THREADS": "4"}, "validated", 1.1, (1.04, 1.16),
                                  {"source": "runs"})  # fmt: skip
    theirs = fleet_policy(svc, 1.6, (1.4, 1.8))
    w = svc.workload("00c0ffee0003")
    assert w.active_policy is not None and w.active_policy.id == mine.id
    assert w.choice() == (
        f"policy {mine.id}: this node's own evidence, 95% lower bound 1.040 "
        f"(over {theirs.id}: 1.400 from the fleet, unconfirmed here)"
    )
    ((arm, env),) = runs(svc, 8.0, 1)
    assert arm == "-" and env.get("OMP_NUM_THREADS") == "4" and "CUDA_DEVICE_MAX_CONNECTIONS" not in env
    # the fleet's is never tried while this node's own stands: no trial planned
    assert svc.trials.of_workload("00c0ffee0003") == []
    # once suspect elsewhere and not confirmed here, a fleet policy is not applied at all
    svc.library.revert(mine.id, push=False)
    svc.library.note(theirs.id, lambda e: e.update(suspect={"node": "c", "reason": "slower"}))
    assert svc.workload("00c0ffee0003").active_policy is None


def test_among_policies_of_the_same_trust_the_higher_lower_bound_wins(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    recurring(svc, "train")
    wide = svc.library.add_policy("00c0ffee0003", {"OMP_NUM_THREADS": "4"}, "validated", 1.5, (1.01, 2.0),
                                  {"source": "runs"})  # fmt: skip
    tight = svc.library.add_policy("00c0ffee0003", ENV, "validated", 1.2, (1.15, 1.25), {"source": "runs"})
    w = svc.workload("00c0ffee0003")
    assert w.active_policy is not None and w.active_policy.id == tight.id
    want = f"policy {tight.id}: this node's own evidence, 95% lower bound 1.150 (over {wide.id}: 1.010)"
    assert w.choice() == want


def test_a_live_policy_from_the_fleet_is_tried_on_the_run_not_applied(
    tmp_path: Path, write_ring: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live policy from the fleet is not applied as known: its lever, made for this run's
    processes, is tried as a live trial (A and B windows), whose decision is the confirmation."""
    import os

    from gitmd.experiments.decide import Decision, Interval
    from gitmd.jobs.registry import Registration
    from tests.unit.loop.helpers import mapping_child, ring_for

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    svc = make_service(tmp_path)
    recurring(svc, "train")
    svc.library.fleet_outbox = True
    p = svc.library.add_policy("00c0ffee0003", {}, "validated", 3.9, (3.5, 4.3), dict(FLEET),
                               live=[{"lever": "cpu_affinity", "setting": {}}])  # fmt: skip
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(reg)
    st = svc.states.of(view.job.id)
    assert plan.cpus == () and st.live is not None and st.live.confirm  # no CPUs set at exec
    assert not svc.loop.known.window_free_pending(view.job.id)  # not applied from the duty tick
    child = mapping_child(plan.env["GITM_JOB_DIR"])
    started: list[tuple[object, ...]] = []
    try:
        os.sched_setaffinity(child.pid, {min(os.sched_getaffinity(0))})  # squeezed onto one core
        ring_for(write_ring, plan.env["GITM_JOB_DIR"], child.pid)
        monkeypatch.setattr(svc.loop.trials.pool, "submit", lambda fn, *a: started.append(a))
        svc.loop.known.apply(view.job.id)  # as after a window
        ((job_id, lever, cause, _, _, confirm),) = started
        assert job_id == view.job.id and lever.name == "cpu_affinity" and cause == "fleet" and confirm == p.id
        assert st.live is None and svc.interventions.list(view.job.id) == []  # nothing applied outside it
    finally:
        child.kill()
        child.wait()

    class Decided:  # the live trial's outcome, as LiveExperiment.run returns it
        def __init__(self, *a: object, **kw: object) -> None:
            self.exp = type("E", (), {"id": 41, "state": "promoted"})()

        def run(self) -> Decision:
            return Decision(True, "4.100x faster", Interval(4.1, 3.6, 4.6, 4, True))

    monkeypatch.setattr("gitmd.loop.trials.LiveExperiment", Decided)
    import threading

    svc.loop.trials.run_live(view.job.id, lever, "fleet", threading.Event(), None, confirm=p.id)
    held = svc.library.get_policy(p.id)
    assert held.trust == 2 and held.evidence["confirmed"]["experiment"] == 41
    assert outbox(svc) == [("confirm", p.id)] and len(svc.workload("00c0ffee0003").policies) == 1


def test_a_confirmed_fleet_policy_ranks_by_what_this_nodes_runs_measured(tmp_path: Path) -> None:
    """The fleet's figures order only what this node has not measured: a copy claiming 50x that held
    here at 1.05x does not beat a policy this node measured at 1.2x."""
    svc = make_service(tmp_path)
    recurring(svc, "train")
    mine = svc.library.add_policy("00c0ffee0003", {"OMP_NUM_THREADS": "4"}, "validated", 1.2, (1.15, 1.25),
                                  {"source": "runs"})  # fmt: skip
    theirs = fleet_policy(svc, 50.0, (50.0, 60.0))
    svc.library.note(
        theirs.id, lambda e: e.update(confirmed={"held": True, "speedup": 1.05, "ci": [1.031, 1.07]})
    )
    active = svc.workload("00c0ffee0003").active_policy
    assert active is not None and active.id == mine.id


def test_a_confirmation_that_cannot_decide_does_not_keep_the_policy(tmp_path: Path) -> None:
    """Runs without a length by their own clock spoil every pair: the trial is abandoned, and the
    policy, never shown to hold here, is not kept (not suspect: nothing showed it harmful)."""
    svc = make_service(tmp_path)
    recurring(svc, "train")
    p = fleet_policy(svc)
    run_train(svc, CONTRACT, 10.0, 1.0)  # its first run here: a line not run here before opens no pair
    for _ in range(6):
        run_train(svc, CONTRACT, None, 1.0)
    (t,) = svc.trials.of_workload("00c0ffee0003")
    assert t.state == "abandoned"
    gone = svc.library.get_policy(p.id)
    assert gone.status == "reverted" and not gone.evidence["confirmed"]["held"]
    assert not gone.evidence["confirmed"]["suspect"] and outbox(svc) == [("confirm", p.id)]


def test_a_policy_reverted_during_its_confirmation_ends_it(tmp_path: Path) -> None:
    """The fleet reverts the policy (another node found it changed outputs) while this node is
    confirming it: the next launch gets no arm with it, and the trial is abandoned."""
    svc = make_service(tmp_path)
    recurring(svc, "train")
    p = fleet_policy(svc)
    run_train(svc, CONTRACT, 10.0, 1.0)  # its first run here: a line not run here before opens no pair
    runs(svc, 8.0, 2)  # A, B
    svc.library.revert(p.id, push=False)
    ((arm, env),) = runs(svc, 8.0, 1)
    assert arm == "-" and "CUDA_DEVICE_MAX_CONNECTIONS" not in env
    (t,) = svc.trials.of_workload("00c0ffee0003")
    assert t.state == "abandoned" and "no longer" in t.decision["reason"]


def test_a_live_fleet_policy_is_not_tried_on_a_launch_trials_arm(tmp_path: Path) -> None:
    """A launch trial's arm is timed whole: a live trial of a fleet policy in it would change the
    run under its arm (a review). Such an arm runs without it, as a plain run; the policy is tried
    on a run that is no arm."""
    import os

    from gitmd.jobs.registry import Registration
    from gitmd.levers.registry import make

    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    first, _ = svc.register_job(reg)
    assert svc.states.of(first.job.id).live is None  # no policy yet
    svc.report_exit(first.job.id, 0)
    svc.library.fleet_outbox = True
    p = svc.library.add_policy(wid, {}, "validated", 3.9, (3.5, 4.3), dict(FLEET),
                               live=[{"lever": "cpu_affinity", "setting": {}}])  # fmt: skip
    assert svc.trials.plan(wid, make("cuda_device_max_connections"), "launch_bound", 0.5) is not None
    view, plan = svc.register_job(reg)
    st = svc.states.of(view.job.id)
    assert "arm A" in plan.trial and st.live is None and plan.policy_id != p.id and st.policy_id == 0
