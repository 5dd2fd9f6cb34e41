"""Targets (gitmd/loop/targets.py): what a live lever acts on in a running job — its processes, its
background co-tenants, its contexts' sync scheduling, its hook's keep-cache flag — and the co-tenant
yields renewed while their job runs."""

from __future__ import annotations

import json as _json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.jobs.registry import Registration
from gitmd.levers.base import LeverError
from tests.unit.loop.helpers import make_service, mapping_child, ring_for


def test_a_background_cotenant_on_the_same_gpu_is_what_cotenant_yield_acts_on(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    svc = make_service(tmp_path, gpus=2)  # the job on GPU 0, one co-tenant on GPU 1
    targets = svc.loop.targets
    me = (os.getuid(), os.getgid())
    fg, fg_plan = svc.register_job(Registration("train", ("python", "t.py"), "/srv", *me, gpus=(0,)))
    _, og_plan = svc.register_job(
        Registration("elsewhere", ("python", "e.py"), "/srv", *me, gpus=(1,), background=True)
    )
    bg, bg_plan = svc.register_job(Registration("hog", ("python", "h.py"), "/srv", *me, background=True))
    procs = [mapping_child(p.env["GITM_JOB_DIR"]) for p in (fg_plan, og_plan, bg_plan)]
    try:
        for i, (plan, p) in enumerate(zip((fg_plan, og_plan, bg_plan), procs, strict=True)):
            ring_for(write_ring, plan.env["GITM_JOB_DIR"], p.pid, threads=i + 1)
        fg_job = svc.jobs.get(fg.job.id)
        assert [j.id for j in targets.background_cotenants(fg_job)] == [bg.job.id]  # GPU 1 is not shared
        assert (
            targets.background_cotenants(svc.jobs.get(bg.job.id)) == []
        )  # a background job yields, never gains
        lever = targets.live_lever("cotenant_yield", fg_job)
        assert lever is not None and lever.setting["pids"] == [procs[2].pid]
        assert lever.setting["jobs"] == [bg.job.id] and lever.setting["share"] == 750
        target = targets.target(fg.job.id)
        assert target.pids == (procs[0].pid,)  # host levers still act on the job's own processes only
        assert procs[2].pid in target.rings and target.ring_uids == {procs[2].pid: os.getuid()}
        stored = svc.interventions.describe(target)
        again = svc.interventions.rebuild(stored)  # what a restarted gitmd reverts through
        assert again.rings == target.rings and again.ring_uids == target.ring_uids
        procs[2].kill()
        procs[2].wait()
        assert procs[2].pid not in svc.interventions.rebuild(stored).rings  # gone: nothing to revert

        deadline = time.monotonic() + 10
        while targets.live_lever("cotenant_yield", fg_job) is not None and time.monotonic() < deadline:
            time.sleep(0.1)  # the process watcher notices the exit
        assert targets.live_lever("cotenant_yield", fg_job) is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_yield_in_force_is_taken_back_when_the_job_it_yielded_to_ends(tmp_path: Path) -> None:
    """renew_yields: a promoted cotenant_yield whose foreground job ended is reverted (the
    co-tenant here is gone too, so there is nothing to send: the record still says why)."""
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
    got = [svc.loop.targets.sync_spin(job, 4242, 0) for _ in range(5)]
    assert [g is not None for g in got] == [False, False, True, True, False]
    lever = got[2]
    assert lever is not None and lever.setting == {"pid": 4242, "device": 0, "sched": SyncSpin.SPIN}


def test_keep_cache_live_is_tried_only_where_gitmds_hook_reads_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's process whose hook read the keep-cache flag most, asked through each process's
    shim (no window needed); none that read it, or shims that cannot answer, mean no live lever
    (the launch form is tried across runs instead)."""
    from gitmd.levers.shim_knobs import AllocKeepCacheLive

    svc = make_service(tmp_path)
    targets = svc.loop.targets
    view, _ = svc.register_job(Registration("churn", ("python", "c.py"), "/srv", os.getuid(), os.getgid()))
    job = svc.jobs.get(view.job.id)
    assert targets.keep_cache(job) is None  # no process yet
    assert svc.capture is not None
    monkeypatch.setattr(targets, "pids", lambda job_id: (11, 12, 13))
    monkeypatch.setattr(svc.capture, "ring_paths", lambda job_id: {11: "/r/11", 12: "/r/12"})  # 13: no shim
    reads: dict[int, int | Exception] = {}

    def read(self: AllocKeepCacheLive, target: object) -> tuple[int, int]:
        a = reads[int(self.setting["pid"])]
        if isinstance(a, Exception):
            raise a
        return 0, a

    monkeypatch.setattr(AllocKeepCacheLive, "read", read)
    reads.update({11: 0, 12: 0})
    assert targets.keep_cache(job) is None  # nobody calls empty_cache under the hook
    reads.update({11: 40, 12: 900})
    lever = targets.keep_cache(job)
    assert lever is not None and lever.setting == {"pid": 12}
    reads.update({11: 40, 12: LeverError("no such flag (an older shim)")})
    lever = targets.keep_cache(job)
    assert lever is not None and lever.setting == {"pid": 11}
    reads.update({11: LeverError("timeout"), 12: LeverError("timeout")})
    assert targets.keep_cache(job) is None
