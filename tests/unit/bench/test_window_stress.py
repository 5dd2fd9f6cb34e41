"""bench/window_stress.py's count of kernel records per window, by the ring's window markers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from gitmd.capture.abi import load

ROOT = Path(__file__).resolve().parents[3]


def _stress():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("window_stress", ROOT / "bench" / "window_stress.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rows(*items: tuple[str, int]) -> np.ndarray:
    """("open"|"close", window id) markers and ("k", n) runs of n kernel records, in ring order."""
    a = load()
    out = []
    for what, n in items:
        if what == "k":
            out += [(a.const("GITM_REC_KERNEL"), 0, 0)] * n
        else:
            out.append((a.const("GITM_REC_WINDOW"), 1 if what == "open" else 2, n))
    r = np.zeros(len(out), dtype=a.record)
    for i, (t, flags, wid) in enumerate(out):
        r["type"][i], r["flags"][i], r["correlation_id"][i] = t, flags, wid
    return r


def test_kernels_go_to_the_window_their_markers_enclose_across_drains() -> None:
    count = _stress().count_kernels
    a = load()
    per: dict[int, int] = {}
    cur = count(rows(("k", 3), ("open", 1), ("k", 5)), a, per, None)  # before any open: not counted
    assert cur == 1 and per == {1: 5}
    cur = count(rows(("k", 2), ("close", 1), ("k", 4), ("open", 2)), a, per, cur)  # after a close: not
    assert cur == 2 and per == {1: 7, 2: 0}
    cur = count(rows(("close", 2), ("open", 3), ("k", 1), ("close", 3)), a, per, cur)
    assert cur is None and per == {1: 7, 2: 0, 3: 1}  # window 2 opened and held none
