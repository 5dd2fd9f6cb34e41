"""Calls go one way: the API calls the service, the service the loop, the loop everything below it
(analysis, capture, levers, experiments, jobs, store, telemetry); nothing below imports the loop or
the service (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.analysis.test_layering import PACKAGE, imports_of

BELOW = ("analysis", "capture", "levers", "experiments", "jobs", "store", "telemetry", "records.py")
UP = ("gitmd.loop", "gitmd.service", "gitmd.api", "gitmd.daemon")


def _files(name: str) -> list[Path]:
    p = PACKAGE / name
    return [p] if p.is_file() else sorted(p.rglob("*.py"))


def test_nothing_below_the_loop_imports_it_or_the_service() -> None:
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
        for name in BELOW
        for path in _files(name)
        for line, mod in imports_of(path)
        if any(mod == u or mod.startswith(u + ".") for u in UP)
    ]
    assert not bad, bad


def test_the_loop_never_imports_the_service_or_the_api() -> None:
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"
        for path in _files("loop")
        for line, mod in imports_of(path)
        if any(mod == u or mod.startswith(u + ".") for u in ("gitmd.service", "gitmd.api", "gitmd.daemon"))
    ]
    assert not bad, bad


def test_the_service_is_a_thin_facade() -> None:
    assert len((PACKAGE / "service.py").read_text().splitlines()) < 400
