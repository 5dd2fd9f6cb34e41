"""An ended job's last attribution reports, as text the loop encodes (analysis/report_codec.py)."""

from __future__ import annotations

from gitmd.store.db import Store

KEPT = 3  # reports kept a job once it has ended (its latest windows')


class JobReports:
    def __init__(self, store: Store) -> None:
        self.store = store

    def keep(self, job_id: str, reports: dict[int, str]) -> None:
        """The job's reports by window id; only its KEPT latest are stored."""
        latest = sorted(reports)[-KEPT:]
        if not latest:
            return
        with self.store.transaction() as db:
            for wid in latest:
                db.conn.execute(
                    "INSERT OR REPLACE INTO job_reports (job_id, window_id, report) VALUES (?, ?, ?)",
                    (job_id, wid, reports[wid]),
                )
            db.conn.execute(
                "DELETE FROM job_reports WHERE job_id = ? AND window_id NOT IN "
                "(SELECT window_id FROM job_reports WHERE job_id = ? ORDER BY window_id DESC LIMIT ?)",
                (job_id, job_id, KEPT),
            )

    def windows(self, job_id: str) -> list[int]:
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT window_id FROM job_reports WHERE job_id = ? ORDER BY window_id", (job_id,)
            ).fetchall()
        return [int(r[0]) for r in rows]

    def get(self, job_id: str, window_id: int = 0) -> tuple[int, str] | None:
        """(window id, report) of that window, or of the latest one kept (window_id 0)."""
        with self.store.reading() as db:
            if window_id:
                row = db.conn.execute(
                    "SELECT window_id, report FROM job_reports WHERE job_id = ? AND window_id = ?",
                    (job_id, window_id),
                ).fetchone()
            else:
                row = db.conn.execute(
                    "SELECT window_id, report FROM job_reports WHERE job_id = ? "
                    "ORDER BY window_id DESC LIMIT 1",
                    (job_id,),
                ).fetchone()
        return (int(row[0]), str(row[1])) if row else None
