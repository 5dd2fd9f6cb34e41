"""The Granger worker process the daemon uses: same answers as in-process, and a worker that dies
costs one report, not the next."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

from gitmd.analysis.causality import granger
from gitmd.analysis.worker import GrangerWorker


def series() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    x = rng.normal(size=80)
    y = np.r_[0.0, 2 * x[:-1]] + 0.2 * rng.normal(size=80)
    return {"gpu_idle": y}, {"main_wait": x, "noise": rng.normal(size=80)}


def test_worker_answers_like_in_process_and_survives_a_crash() -> None:
    w = GrangerWorker(timeout_s=120)
    try:
        t, c = series()
        assert w(t, c) == granger(t, c)
        pool = w._get()
        for p in list(pool._processes.values()):  # type: ignore[union-attr]
            p.kill()
        with pytest.raises(concurrent.futures.process.BrokenProcessPool):
            w(t, c)
        assert w(t, c) == granger(t, c)  # a fresh worker
    finally:
        w.close()
