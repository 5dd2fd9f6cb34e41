"""Known (gitmd/loop/known.py): a recurring job's validated live policy, applied once its processes
show and kept, with no trial; a lever whose target never shows is dropped."""

from __future__ import annotations

import json as _json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.jobs.registry import Registration
from gitmd.loop.known import LIVE_POLICY_TICKS
from tests.unit.loop.helpers import mapping_child, pending, ring_for, service_with_policy


def test_a_recurring_jobs_live_policy_is_applied_when_its_process_shows(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    svc = service_with_policy(tmp_path, [{"lever": "cpu_affinity", "setting": {}}])
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(reg)
    (policy,) = svc.workload("00c0ffee0003").policies
    assert (
        plan.policy_id == policy.id
        and _json.loads(_json.dumps(list(policy.live)))[0]["lever"] == "cpu_affinity"
    )
    child = mapping_child(plan.env["GITM_JOB_DIR"])
    try:
        first = min(os.sched_getaffinity(0))
        os.sched_setaffinity(child.pid, {first})  # started squeezed onto one core
        ring_for(write_ring, plan.env["GITM_JOB_DIR"], child.pid)
        assert [alive for _, alive in svc.get_job(view.job.id).processes] == [True]
        ran: list[object] = []

        def run_now(fn: Callable[[str], None], job_id: str) -> None:
            ran.append(fn)
            fn(job_id)

        svc.loop.pool.submit = run_now  # type: ignore[method-assign,assignment]
        # the duty tick: a known job settles (no window before its processes are settle_s old), and
        # a lever that needs no window is applied from the tick itself
        svc.duty_cycle()
        st = svc.states.of(view.job.id)
        assert st.settling and st.live is None
        assert ran and svc.loop.run_window not in ran
        moved = os.sched_getaffinity(child.pid)
        assert len(moved) >= 2 and moved != {first}
        (iv,) = svc.interventions.list(view.job.id)
        assert iv.lever == "cpu_affinity" and iv.state == "promoted" and f"policy {policy.id}" in iv.reason
        assert "cpu_affinity" in st.tried  # no experiment on it in this run
        # changed by gitmd: its windows no longer re-fingerprint it (a changed step would be taken
        # for another workload, the policy then stored where the next launch never looks)
        assert svc.loop.observe.changed(view.job.id)
        other, _ = svc.register_job(
            Registration("new", ("python", "new.py"), "/srv", os.getuid(), os.getgid())
        )
        assert not svc.loop.observe.changed(other.job.id)
        svc.report_exit(view.job.id, 0)
        assert os.sched_getaffinity(child.pid) == moved  # promoted: kept while the process runs
    finally:
        child.kill()
        child.wait()


def test_window_free_policy_levers_are_tried_from_the_tick_then_dropped(tmp_path: Path) -> None:
    """From the duty tick only the levers that need no window are tried, and no window is counted;
    one whose target never shows (no background co-tenant here) is dropped after LIVE_POLICY_TICKS
    ticks, while a lever that needs a window waits for the windows."""
    live = [
        {"lever": "cotenant_yield", "setting": {"share": 750, "period_ms": 100}},
        {"lever": "stream_priority", "setting": {"priority": -5}},
    ]
    svc = service_with_policy(tmp_path, live)
    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, _ = svc.register_job(reg)
    job_id = view.job.id
    assert [x["lever"] for x in pending(svc, job_id).items] == ["cotenant_yield", "stream_priority"]
    assert not svc.states.of(job_id).settling  # the stream needs a window: the early one stays
    for _ in range(LIVE_POLICY_TICKS - 1):
        svc.loop.known.apply(job_id, window_free=True)
    assert len(pending(svc, job_id).items) == 2 and pending(svc, job_id).windows == 0
    svc.loop.known.apply(job_id, window_free=True)
    left, windows = pending(svc, job_id).items, pending(svc, job_id).windows
    assert [x["lever"] for x in left] == ["stream_priority"] and windows == 0
