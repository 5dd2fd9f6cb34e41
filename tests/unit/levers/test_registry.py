"""The config's lists of live and launch levers name exactly the catalog's levers of those kinds
(config cannot import the catalog without pulling the levers' dependencies into every import)."""

from __future__ import annotations

from gitmd.config import LAUNCH_LEVERS, LIVE_LEVERS
from gitmd.levers.base import Kind
from gitmd.levers.registry import CATALOG


def test_config_lever_lists_match_the_catalog() -> None:
    assert set(LAUNCH_LEVERS) == {n for n, c in CATALOG.items() if c.kind is Kind.LAUNCH}
    assert set(LIVE_LEVERS) == {n for n, c in CATALOG.items() if c.kind in (Kind.LIVE_HOST, Kind.LIVE_SHIM)}
