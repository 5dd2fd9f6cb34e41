"""Applying levers safely: the record and the audit row are committed *before* the change, the
change is verified, and anything not promoted is reverted — when its experiment ends, when the job
or gitmd stops, and at the latest when gitmd next starts (``recover``), before it serves.

A live intervention is tied to its processes by pid *and* start time, so a revert after a restart
never touches a process that merely reuses a pid.
"""

from __future__ import annotations

import builtins
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gitmd.jobs.liveness import start_ticks
from gitmd.levers import registry
from gitmd.levers.base import Kind, Lever, LeverError, Target
from gitmd.store import audit
from gitmd.store.db import Store

log = logging.getLogger(__name__)

PENDING = ("applying", "applied")


@dataclass(frozen=True)
class Intervention:
    id: int
    job_id: str
    experiment_id: int | None
    lever: str
    kind: str
    setting: dict[str, Any]
    target: dict[str, Any]
    saved: dict[str, Any]
    state: str
    reason: str
    created_ns: int
    updated_ns: int


def _row(r: dict[str, Any]) -> Intervention:
    return Intervention(
        id=r["id"],
        job_id=r["job_id"],
        experiment_id=r["experiment_id"],
        lever=r["lever"],
        kind=r["kind"],
        setting=json.loads(r["setting"]),
        target=json.loads(r["target"]),
        saved=json.loads(r["saved"]),
        state=r["state"],
        reason=r["reason"],
        created_ns=r["created_ns"],
        updated_ns=r["updated_ns"],
    )


class Interventions:
    def __init__(self, store: Store, backend: Any = None) -> None:
        self.store = store
        self.backend = backend

    # -- targets as stored ----------------------------------------------------------------------
    @staticmethod
    def describe(target: Target) -> dict[str, Any]:
        return {
            "pids": [[p, start_ticks(p)] for p in target.pids],
            "env": target.env,
            "gpus": list(target.gpus),
            "rings": {str(p): path for p, path in target.rings.items()},
            "owner_uid": target.owner_uid,
            # other jobs' processes (a background co-tenant): their uid and start time
            "ring_uids": {str(p): [uid, start_ticks(p)] for p, uid in target.ring_uids.items()},
        }

    def rebuild(self, stored: dict[str, Any]) -> Target:
        """The target as it is now: only the stored processes that still run (same start time)."""
        alive = tuple(
            p for p, ticks in stored.get("pids", []) if ticks is not None and start_ticks(p) == ticks
        )
        others = {
            int(p): int(uid)
            for p, (uid, ticks) in stored.get("ring_uids", {}).items()
            if ticks is not None and start_ticks(int(p)) == ticks
        }
        return Target(
            pids=alive,
            env=dict(stored.get("env", {})),
            gpus=tuple(stored.get("gpus", [])),
            backend=self.backend,
            rings={
                int(p): path
                for p, path in stored.get("rings", {}).items()
                if int(p) in alive or int(p) in others
            },
            owner_uid=stored.get("owner_uid"),
            ring_uids=others,
        )

    # -- the life of one intervention -----------------------------------------------------------
    def apply(
        self,
        job_id: str,
        lever: Lever,
        target: Target,
        actor: str = "gitmd",
        experiment_id: int | None = None,
        saved: dict[str, Any] | None = None,
    ) -> Intervention:
        """capture -> record (committed) -> apply -> verify; on any failure reverted and recorded.
        ``saved``: what a revert restores, when it is not what the target has now (a setting the
        job's launcher already made at exec: the state before it)."""
        saved = lever.capture(target) if saved is None else saved
        now = time.time_ns()
        with self.store.transaction() as db:
            cur = db.conn.execute(
                "INSERT INTO interventions (job_id, experiment_id, lever, kind, setting, target, saved, "
                "state, created_ns, updated_ns) VALUES (?, ?, ?, ?, ?, ?, ?, 'applying', ?, ?)",
                (
                    job_id,
                    experiment_id,
                    lever.name,
                    lever.kind.value,
                    json.dumps(lever.setting),
                    json.dumps(self.describe(target)),
                    json.dumps(saved),
                    now,
                    now,
                ),
            )
            iid = int(cur.lastrowid or 0)
            audit.insert(
                db,
                audit.row(
                    actor, None, "apply", "ok", job_id, {"intervention": iid, "lever": lever.describe()}
                ),
            )
        try:
            lever.apply(target)
            lever.verify(target)
        except LeverError as e:
            try:
                lever.revert(target, saved)
            except LeverError as e2:
                log.error("intervention %d: revert after a failed apply failed too: %s", iid, e2)
            self._set(iid, "failed", str(e), actor, job_id)
            raise
        self._set(iid, "applied", "", actor, job_id, record=False)
        return self.get(iid)

    def revert(self, iid: int, reason: str, actor: str = "gitmd") -> Intervention:
        iv = self.get(iid)
        if iv.state not in PENDING:
            return iv
        lever = registry.make(iv.lever, **iv.setting)
        target = self.rebuild(iv.target)
        # other jobs' processes it acted on (a co-tenant's yield) outlive the job's own
        if lever.kind is Kind.LAUNCH or target.pids or target.ring_uids or lever.kind is Kind.DEVICE:
            try:
                lever.revert(target, iv.saved)
            except LeverError as e:
                self._set(iid, "failed", f"revert failed: {e}", actor, iv.job_id)
                raise
        self._set(iid, "reverted", reason, actor, iv.job_id)
        return self.get(iid)

    def unpromote(self, iid: int) -> None:
        """Back to applied, so an operator's revert can take a promoted change away."""
        with self.store.transaction() as db:
            db.conn.execute(
                "UPDATE interventions SET state = 'applied', updated_ns = ? "
                "WHERE id = ? AND state = 'promoted'",
                (time.time_ns(), iid),
            )

    def promote(self, iid: int, reason: str, actor: str = "gitmd") -> Intervention:
        iv = self.get(iid)
        if iv.state != "applied":
            raise LeverError(f"intervention {iid} is {iv.state}, not applied")
        self._set(iid, "promoted", reason, actor, iv.job_id)
        return self.get(iid)

    def _set(self, iid: int, state: str, reason: str, actor: str, job_id: str, record: bool = True) -> None:
        with self.store.transaction() as db:
            db.conn.execute(
                "UPDATE interventions SET state = ?, reason = ?, updated_ns = ? WHERE id = ?",
                (state, reason[:2000], time.time_ns(), iid),
            )
            if record:
                outcome = "failed" if state == "failed" else "ok"
                audit.insert(
                    db,
                    audit.row(
                        actor, None, state, outcome, job_id, {"intervention": iid, "reason": reason[:500]}
                    ),
                )

    # -- reading ----------------------------------------------------------------------------
    def get(self, iid: int) -> Intervention:
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM interventions WHERE id = ?", [iid]))
        if not rows:
            raise KeyError(iid)
        return _row(rows[0])

    def list(self, job_id: str = "", pending_only: bool = False) -> list[Intervention]:
        where, args = [], []
        if job_id:
            where.append("job_id = ?")
            args.append(job_id)
        if pending_only:
            where.append(f"state IN ({', '.join('?' for _ in PENDING)})")
            args.extend(PENDING)
        sql = (
            "SELECT * FROM interventions"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + " ORDER BY id"
        )
        with self.store.reading() as db:
            return [_row(r) for r in db.query(sql, args)]

    def in_force(self, lever: str) -> builtins.list[Intervention]:
        """Every intervention of ``lever`` applied or promoted now (an indexed query, not a scan of
        the whole history)."""
        with self.store.reading() as db:
            return [
                _row(r)
                for r in db.query(
                    "SELECT * FROM interventions WHERE lever = ? AND state IN ('applied', 'promoted') "
                    "ORDER BY id",
                    [lever],
                )
            ]

    def revert_all(
        self, reason: str, job_id: str = "", on_error: Callable[[Intervention, Exception], None] | None = None
    ) -> int:
        """Revert every intervention not promoted (of one job, or all). How many were reverted."""
        n = 0
        for iv in self.list(job_id, pending_only=True):
            try:
                self.revert(iv.id, reason)
                n += 1
            except (LeverError, KeyError) as e:
                log.error("cannot revert intervention %d (%s on job %s): %s", iv.id, iv.lever, iv.job_id, e)
                if on_error:
                    on_error(iv, e)
        return n

    def recover(self) -> int:
        """At start, before serving: every intervention a previous gitmd left unpromoted is reverted."""
        n = self.revert_all("gitmd restarted: the intervention was never promoted")
        if n:
            log.warning("reverted %d intervention(s) left unpromoted by the previous gitmd", n)
        return n
