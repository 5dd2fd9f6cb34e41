from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gitmd.store import audit
from gitmd.store.audit import Audit
from gitmd.store.db import Store


def test_audit_is_append_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    log = Audit(store)
    log.append(audit.row("uid 5 (x)", 5, "PinPolicy", "denied", "7", "needs admin"))
    log.append(audit.row("tls:ctl", None, "RegisterJob", "ok", "j1", {"uid": 5}, scheduler_job_id="42"))
    entries = log.list()
    assert [e.action for e in entries] == ["RegisterJob", "PinPolicy"]
    assert log.list(scheduler_job_id="42")[0].detail == '{"uid": 5}'
    assert [e.target for e in log.list(target="7")] == ["7"]
    for sql in ("UPDATE audit SET outcome = 'ok'", "DELETE FROM audit"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store.conn.execute(sql)
    assert len(log.list()) == 2
    with pytest.raises(ValueError):
        audit.row("x", None, "y", "maybe")
