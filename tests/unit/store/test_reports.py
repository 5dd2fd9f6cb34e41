"""An ended job's kept reports: its latest KEPT, by window id."""

from __future__ import annotations

from pathlib import Path

from gitmd.store.db import Store
from gitmd.store.reports import KEPT, JobReports


def test_the_latest_reports_are_kept_and_found(tmp_path: Path) -> None:
    r = JobReports(Store(tmp_path / "g.db"))
    assert r.get("j1") is None and r.windows("j1") == []
    r.keep("j1", {w: f"report {w}" for w in range(1, 6)})
    assert r.windows("j1") == list(range(6 - KEPT, 6))
    assert r.get("j1") == (5, "report 5") and r.get("j1", 4) == (4, "report 4") and r.get("j1", 1) is None
    r.keep("j1", {9: "report 9"})  # a second report of its exit: still the latest KEPT
    assert r.windows("j1") == [4, 5, 9][-KEPT:] and r.get("j2") is None
    r.keep("j2", {})
    assert r.windows("j2") == []
