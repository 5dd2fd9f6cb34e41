from __future__ import annotations

import dataclasses
import threading
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


def test_history_is_read_while_windows_are_added() -> None:
    """A duty window adds to a job's history on the scheduler's thread while an experiment's
    thread fits its model (H200, 2026-12-03: "dictionary changed size during iteration")."""
    r = records("launch-1k.w1.npz")
    variants = []
    for i in range(300):  # each window brings kernel keys the history has not seen
        k = r.kernels.copy()
        k["grid_x"] = k["grid_x"] + i + 1
        variants.append(dataclasses.replace(r, kernels=k))
    h = History()
    h.add(r, 0.5)
    errors: list[BaseException] = []

    def add() -> None:
        try:
            for v in variants:
                h.add(v, 0.5)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=add)
    t.start()
    while t.is_alive():
        h.model()
        h.idle_share()
    t.join()
    assert not errors
    assert h.windows == 301 and len(h.model().stats) > len(KernelModel.fit([r]).stats)
