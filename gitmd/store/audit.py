"""The audit table: append-only (triggers refuse UPDATE and DELETE), written before actions take effect."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from gitmd.store.db import Store

OUTCOMES = ("ok", "denied", "unauthenticated", "failed")
MAX_DETAIL = 4096


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at_ns: int
    actor: str
    actor_uid: int | None
    action: str
    target: str
    outcome: str
    detail: str
    scheduler_job_id: str


def row(
    actor: str,
    actor_uid: int | None,
    action: str,
    outcome: str,
    target: str = "",
    detail: str | dict[str, Any] = "",
    scheduler_job_id: str = "",
) -> dict[str, Any]:
    """An audit row to insert, inside the transaction of the change it records when there is one."""
    if outcome not in OUTCOMES:
        raise ValueError(f"audit outcome {outcome!r}")
    text = detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True)
    return {
        "at_unix_ns": time.time_ns(),
        "actor": actor[:256],
        "actor_uid": actor_uid,
        "action": action[:128],
        "target": target[:256],
        "outcome": outcome,
        "detail": text[:MAX_DETAIL],
        "scheduler_job_id": scheduler_job_id[:256],
    }


_INSERT = (
    "INSERT INTO audit (at_unix_ns, actor, actor_uid, action, target, outcome, detail, scheduler_job_id) "
    "VALUES (:at_unix_ns, :actor, :actor_uid, :action, :target, :outcome, :detail, :scheduler_job_id)"
)


def insert(db: sqlite_utils.Database, entry: dict[str, Any]) -> None:
    db.conn.execute(_INSERT, entry)


class Audit:
    def __init__(self, store: Store) -> None:
        self.store = store

    def append(self, entry: dict[str, Any]) -> None:
        with self.store.transaction() as db:
            insert(db, entry)

    def scheduler_job_owner(self, scheduler_job_id: str) -> int | None:
        """The uid the scheduler said it started ``scheduler_job_id`` for (its latest "start"
        report, ReportSchedulerJob); None when it said nothing of it (an indexed lookup)."""
        with self.store.reading() as db:
            r = db.execute(
                "SELECT detail FROM audit WHERE scheduler_job_id = ? AND action = 'SchedulerJobStart' "
                "AND outcome = 'ok' ORDER BY id DESC LIMIT 1",
                [scheduler_job_id],
            ).fetchone()
        try:
            uid = json.loads(r[0]).get("uid") if r else None
        except (ValueError, AttributeError):
            return None
        return int(uid) if isinstance(uid, int) and not isinstance(uid, bool) else None

    def list(
        self, limit: int = 100, target: str = "", scheduler_job_id: str = "", before_id: int = 0
    ) -> list[AuditEntry]:
        where: list[str] = ["1 = 1"]
        args: list[str | int] = []
        if target:
            where.append("target = ?")
            args.append(target)
        if scheduler_job_id:
            where.append("scheduler_job_id = ?")
            args.append(scheduler_job_id)
        if before_id > 0:
            where.append("id < ?")
            args.append(before_id)
        sql = f"SELECT * FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?"
        with self.store.reading() as db:
            rows = list(db.query(sql, [*args, max(1, min(limit, 10_000))]))
        return [
            AuditEntry(
                id=r["id"],
                at_ns=r["at_unix_ns"],
                actor=r["actor"],
                actor_uid=r["actor_uid"],
                action=r["action"],
                target=r["target"],
                outcome=r["outcome"],
                detail=r["detail"],
                scheduler_job_id=r["scheduler_job_id"],
            )
            for r in rows
        ]
