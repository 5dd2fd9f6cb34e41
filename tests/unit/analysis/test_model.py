from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gitmd.analysis.model import History, KernelModel, summarize
from gitmd.analysis.report import busiest
from gitmd.capture import capture_file

PLANTED = Path(__file__).resolve().parents[2] / "fixtures" / "planted"


def records(name: str):  # type: ignore[no-untyped-def]
    m = busiest(capture_file.loads(PLANTED / name))
    assert m is not None
    return m.records.timed()


def test_a_window_against_its_own_history_has_no_excess() -> None:
    r = records("launch-1k.w1.npz")
    model = KernelModel.fit([r])
    assert model.stats and all(n >= 5 for _, _, n in model.stats.values())
    s = summarize(model, r, from_history=True)
    assert s.modelled == len(r.kernels) and s.slow < 0.01 * s.modelled


def test_slower_kernels_are_found() -> None:
    r = records("launch-1k.w1.npz")
    h = History()
    h.add(r, 0.9)
    k = r.kernels.copy()
    dur = k["end_ns"] - k["start_ns"]
    slow = np.zeros(len(k), dtype=bool)
    slow[::10] = True
    k["end_ns"][slow] = k["start_ns"][slow] + 3 * dur[slow]
    s = summarize(h.model(), dataclasses.replace(r, kernels=k), from_history=True)
    assert abs(s.slow - slow.sum()) <= 0.02 * slow.sum()
    assert abs(s.excess_ns - float((2 * dur[slow]).sum())) < 0.1 * float((2 * dur[slow]).sum())
    assert h.idle_share() == 0.9 and h.windows == 1


def test_history_keeps_the_newest_runs_only() -> None:
    r = records("launch-1k.w1.npz")
    h = History()
    for _ in range(5):
        h.add(r, 0.5)
    assert all(n <= History.KEEP_RUNS for _, _, n in h.model().stats.values())
    assert h.windows == 5
