"""The store kept to a size: old ended jobs, their kept reports and finished interventions, and old
or surplus audit rows go; running jobs, recent ones and the library's evidence stay."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gitmd.config import CaptureConfig
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.store.audit import Audit
from gitmd.store.audit import row as audit_row
from gitmd.store.db import Store
from gitmd.store.prune import DAY_NS, prune
from gitmd.store.reports import JobReports


def test_old_ended_jobs_and_audit_rows_are_pruned_and_nothing_else(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    jobs = JobRegistry(store, tmp_path / "run", CaptureConfig())
    me = (os.getuid(), os.getgid())

    def job(name: str) -> str:
        j, _ = jobs.register(Registration(name, ("prog",), "/", *me, capture=False))
        return j.id

    old, recent, running = job("old"), job("recent"), job("running")
    for j in (old, recent):
        jobs.exited(j, 0)
    now = time.time_ns()
    with store.transaction() as db:
        db.conn.execute("UPDATE jobs SET ended_ns = ? WHERE id = ?", (now - 100 * DAY_NS, old))
    JobReports(store).keep(old, {1: "r"})
    JobReports(store).keep(recent, {1: "r"})
    audit = Audit(store)
    with store.transaction() as db:  # two rows from 100 days ago (the audit cannot be back-dated)
        for _ in range(2):
            db.conn.execute(
                "INSERT INTO audit (at_unix_ns, actor, action, outcome) VALUES (?, 'gitmd', 'X', 'ok')",
                (now - 100 * DAY_NS,),
            )
    for _ in range(3):
        audit.append(audit_row("gitmd", None, "X", "ok", "", {}))
    before = len(audit.list(limit=1000))
    got = prune(store, now, keep_days=90, audit_max_rows=0)
    assert got.jobs == 1 and got.reports == 1 and got.audit == 2
    ids = {j.id for j in jobs.list(include_exited=True)}
    assert ids == {recent, running}  # the running job and the recent one stay
    assert JobReports(store).get(old) is None and JobReports(store).get(recent) is not None
    assert len(audit.list(limit=1000)) == before - 2
    # a cap on the audit: the oldest rows beyond it go
    got = prune(store, now, keep_days=0, audit_max_rows=2)
    assert got.jobs == 0 and len(audit.list(limit=1000)) == 2
    assert not prune(store, now, keep_days=0, audit_max_rows=0)  # 0 and 0: nothing is ever deleted
    # still append-only: the newest rows cannot be deleted or changed, nor the mark moved back
    import sqlite3

    import pytest

    for sql in (
        "DELETE FROM audit",
        "UPDATE audit SET actor = 'x'",
        "UPDATE audit_retention SET below_id = 0",
        "DELETE FROM audit_retention",
    ):
        with pytest.raises(sqlite3.IntegrityError), store.transaction() as db:
            db.conn.execute(sql)
    assert len(audit.list(limit=1000)) == 2


def test_experiments_go_with_their_jobs_unless_a_policy_rests_on_them(tmp_path: Path) -> None:
    """Hardening issue, item 5: experiment rows were never pruned (a user's RecordTune loop wrote
    them without bound). Those of pruned jobs go, except the ones a policy's evidence names (the
    experiment that promoted it, or the one that confirmed it here)."""
    import json

    store = Store(tmp_path / "g.db")
    jobs = JobRegistry(store, tmp_path / "run", CaptureConfig())
    j, _ = jobs.register(Registration("old", ("prog",), "/", os.getuid(), os.getgid(), capture=False))
    jobs.exited(j.id, 0)
    now = time.time_ns()
    with store.transaction() as db:
        db.conn.execute("UPDATE jobs SET ended_ns = ? WHERE id = ?", (now - 100 * DAY_NS, j.id))
        ids = [
            db.conn.execute(
                "INSERT INTO experiments (job_id, lever, setting, cause, state, arms, decision, created_ns, "
                "updated_ns) VALUES (?, 'tf32', '{}', 'tune', 'reverted', '[]', '{}', 0, 0)",
                (j.id,),
            ).lastrowid
            for _ in range(4)
        ]
        db.conn.execute(
            "INSERT INTO workloads (id, signature, first_seen_ns, last_seen_ns) VALUES ('w1', '{}', 0, 0)"
        )
        for evidence in ({"experiment": ids[0]}, {"confirmed": {"experiment": ids[1]}}):
            db.conn.execute(
                "INSERT INTO policies (workload_id, settings, status, evidence, created_ns, updated_ns) "
                "VALUES ('w1', '{\"env\": {}}', 'validated', ?, 0, 0)",
                (json.dumps(evidence),),
            )
    got = prune(store, now, keep_days=90, audit_max_rows=0)
    assert got.jobs == 1 and got.experiments == 2
    with store.reading() as db:
        left = [r[0] for r in db.conn.execute("SELECT id FROM experiments ORDER BY id")]
    assert left == ids[:2]


def test_kept_windows_of_pruned_jobs_go_too(tmp_path: Path) -> None:
    from gitmd.store.prune import prune_windows

    store = Store(tmp_path / "g.db")
    jobs = JobRegistry(store, tmp_path / "run", CaptureConfig())
    j, _ = jobs.register(Registration("live", ("prog",), "/", os.getuid(), os.getgid(), capture=False))
    windows = tmp_path / "windows"
    for name in (j.id, "0123456789ab"):  # a job the store holds, and one it pruned
        (windows / name).mkdir(parents=True)
        (windows / name / "1.npz").write_bytes(b"x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (windows / "feedfacecafe").symlink_to(elsewhere)  # never followed
    assert prune_windows(store, windows) == 1
    assert sorted(p.name for p in windows.iterdir()) == sorted([j.id, "feedfacecafe"]) and elsewhere.exists()
    assert prune_windows(store, tmp_path / "none") == 0
