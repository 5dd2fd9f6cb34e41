"""The store kept to a size: ended jobs (with their kept reports and finished interventions) and
audit rows older than daemon.keep_days are deleted, and the audit never holds more than
daemon.audit_max_rows rows (the oldest go first). The library (workloads, policies), launch trials
and the experiments policies rest on (their evidence names them) are kept; the other experiments
go with their jobs. Hardening issue, item 5: job, audit and
experiment rows were never pruned; refused calls were audited at 1,412 rows/s."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitmd.store.db import Store

DAY_NS = 86_400 * 10**9


@dataclass(frozen=True)
class Pruned:
    jobs: int = 0
    reports: int = 0
    interventions: int = 0
    audit: int = 0
    experiments: int = 0

    def __bool__(self) -> bool:
        return bool(self.jobs or self.reports or self.interventions or self.audit or self.experiments)


def prune(store: Store, now_ns: int, keep_days: float, audit_max_rows: int) -> Pruned:
    """``keep_days`` 0: nothing is deleted by age; ``audit_max_rows`` 0: no cap."""
    jobs = reports = interventions = audit = experiments = 0
    with store.transaction() as db:
        c = db.conn
        if keep_days > 0:
            cutoff = now_ns - int(keep_days * DAY_NS)
            ended = "state IN ('exited', 'lost') AND ended_ns IS NOT NULL AND ended_ns < ?"
            old = f"SELECT id FROM jobs WHERE {ended}"
            reports = c.execute(f"DELETE FROM job_reports WHERE job_id IN ({old})", (cutoff,)).rowcount
            interventions = c.execute(
                f"DELETE FROM interventions WHERE job_id IN ({old}) AND state IN ('reverted', 'failed')",
                (cutoff,),
            ).rowcount
            jobs = c.execute(
                f"DELETE FROM jobs WHERE {ended} AND id NOT IN (SELECT job_id FROM interventions)",
                (cutoff,),
            ).rowcount
            # experiments of jobs gone that no policy rests on (its evidence, or its confirmation,
            # names them): a job's undecided or lost trials are no evidence of anything kept
            experiments = c.execute(
                "DELETE FROM experiments WHERE job_id NOT IN (SELECT id FROM jobs) AND id NOT IN ("
                "SELECT json_extract(evidence, '$.experiment') FROM policies "
                "WHERE json_valid(evidence) AND json_extract(evidence, '$.experiment') IS NOT NULL "
                "UNION SELECT json_extract(evidence, '$.confirmed.experiment') FROM policies "
                "WHERE json_valid(evidence) AND json_extract(evidence, '$.confirmed.experiment') IS NOT NULL)"
            ).rowcount
            row = c.execute("SELECT MAX(id) FROM audit WHERE at_unix_ns < ?", (cutoff,)).fetchone()
            audit += _audit_below(c, int(row[0] or 0))
        if audit_max_rows > 0:
            row = c.execute(
                "SELECT id FROM audit ORDER BY id DESC LIMIT 1 OFFSET ?", (audit_max_rows,)
            ).fetchone()
            audit += _audit_below(c, int(row[0]) if row else 0)
    return Pruned(jobs, reports, interventions, audit, experiments)


def _audit_below(c: Any, below_id: int) -> int:
    """The audit's rows up to ``below_id`` deleted: the retention mark moves there first (the audit
    is append-only but for its oldest rows: migration 0017)."""
    if below_id <= 0:
        return 0
    c.execute("UPDATE audit_retention SET below_id = MAX(below_id, ?) WHERE id = 1", (below_id,))
    return int(c.execute("DELETE FROM audit WHERE id <= ?", (below_id,)).rowcount)


def prune_windows(store: Store, windows: Path) -> int:
    """The kept capture windows (capture.keep_windows, ``<state>/windows/<job id>/``) of jobs the
    store no longer holds, removed: they were kept for ever after their job was pruned. Folders only,
    never through a link. Returns how many went."""
    if not windows.is_dir():
        return 0
    with store.reading() as db:
        known = {r[0] for r in db.conn.execute("SELECT id FROM jobs")}
    gone = 0
    for d in windows.iterdir():
        if d.name in known or d.is_symlink() or not d.is_dir():
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone += 1
    return gone
