from __future__ import annotations

import numpy as np

from gitmd.analysis.causality import MIN_BINS, granger


def test_a_lagged_cause_is_found_and_noise_is_not() -> None:
    rng = np.random.default_rng(7)
    n = 120
    x = rng.normal(size=n)
    y = np.zeros(n)
    for t in range(1, n):  # y follows x one bin later
        y[t] = 0.2 * y[t - 1] + 1.5 * x[t - 1] + 0.3 * rng.normal()
    noise = rng.normal(size=n)
    tests = {t.series: t for t in granger({"kernel_residual": y}, {"x": x, "noise": noise})}
    assert tests["x"].significant and tests["x"].lag == 1 and tests["x"].q_value < 1e-6
    assert not tests["noise"].significant and tests["noise"].q_value >= tests["noise"].p_value - 1e-12


def test_what_cannot_be_tested_says_why() -> None:
    y = np.arange(50, dtype=float) % 7
    tests = {t.series: t for t in granger({"gpu_idle": y}, {"flat": np.ones(50), "short": np.ones(5)})}
    assert tests["flat"].note == "does not vary" and not tests["flat"].significant
    assert tests["short"].note == "misaligned"
    short = granger({"y": y[: MIN_BINS - 1]}, {"x": y[: MIN_BINS - 1] + 1})
    assert short[0].note.startswith("too few bins") and np.isnan(short[0].p_value)


def test_a_trending_series_is_differenced_first() -> None:
    rng = np.random.default_rng(3)
    n = 100
    walk = np.cumsum(rng.normal(size=n))  # not stationary
    y = np.r_[0.0, walk[:-1]] + 0.1 * rng.normal(size=n)
    t = granger({"y": y}, {"walk": walk})[0]
    assert t.differenced and t.significant
