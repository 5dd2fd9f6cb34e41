"""The decision: promote a change only when it is measurably faster and the outputs held.

The metric is a time per step (lower is better). Baseline and treatment samples come interleaved
(ABAB…): consecutive A/B pairs see the same machine state, so the speedup is estimated from the
per-pair log ratios, which cancels slow drift — identical runs on the H200 differ by up to ±30%
between processes, far more than within a pair. The interval is Student's t on the mean of the
per-pair log ratios: with the three to eight pairs an experiment has, a percentile bootstrap over
pairs is far too narrow (its spread is the sample's, not the t distribution's, about half the width
at four pairs), and a CI run saw a treatment that changed nothing (the job's own core again)
promoted at 1.203x, bootstrap 95% 1.065-1.347; the t interval on those pairs reaches below 1.
Unpaired samples fall back to a bootstrap of the ratio of medians.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gitmd.experiments.equivalence import Verdict
from gitmd.levers.base import Risk

MIN_GAIN = 0.03
MIN_PAIRS = 3
CONFIDENCE = 0.95
RESAMPLES = 4000


@dataclass(frozen=True)
class Interval:
    speedup: float  # baseline time / treatment time: 1.10 is 10% faster
    low: float
    high: float
    pairs: int
    paired: bool


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    interval: Interval | None


def _clean(xs: Sequence[float]) -> np.ndarray:
    a = np.asarray(xs, dtype=np.float64)
    if a.ndim != 1 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError("step times must be finite and positive")
    return a


T_DRAWS = 4_000_000


@functools.cache
def t_quantile(q: float, df: int) -> float:
    """The q quantile of Student's t with ``df`` degrees of freedom, from a seeded sample of numpy's
    own t generator (scipy is kept out of the daemon: see analysis/worker.py), taken on the safe
    side: the sample's quantile at q plus three binomial standard errors, so that it is at least the
    exact value but for a chance in a thousand (a slightly wider interval, never a narrower one).
    Cached, one sample per (q, df), ~0.2 s the first time."""
    if df < 1 or not 0.5 <= q < 1:
        raise ValueError("t quantile needs df >= 1 and 0.5 <= q < 1")
    safe = min(q + 3 * math.sqrt(q * (1 - q) / T_DRAWS), 1 - 1 / T_DRAWS)
    return float(np.quantile(np.random.default_rng(0).standard_t(df, size=T_DRAWS), safe))


def speedup_interval(
    baseline: Sequence[float],
    treatment: Sequence[float],
    paired: bool = True,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Interval:
    a, b = _clean(baseline), _clean(treatment)
    rng = np.random.default_rng(seed)
    alpha = (1 - confidence) / 2
    if paired and len(a) == len(b) and len(a) >= 2:
        r = np.log(a / b)  # > 0: the treatment was faster in that pair
        half = t_quantile(1 - alpha, len(r) - 1) * r.std(ddof=1) / math.sqrt(len(r))
        m = float(r.mean())
        return Interval(math.exp(m), math.exp(m - half), math.exp(m + half), len(r), True)
    ia = rng.integers(0, len(a), size=(resamples, len(a)))
    ib = rng.integers(0, len(b), size=(resamples, len(b)))
    boots = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return Interval(float(np.median(a) / np.median(b)), float(lo), float(hi), min(len(a), len(b)), False)


def decide(
    baseline: Sequence[float],
    treatment: Sequence[float],
    verdict: Verdict,
    risk: Risk,
    min_gain: float = MIN_GAIN,
    paired: bool = True,
) -> Decision:
    """Promote only when the interval's lower bound clears 1 + min_gain and the contract held."""
    if not verdict.ok:
        return Decision(False, "outputs changed: " + "; ".join(verdict.failures), None)
    if risk is Risk.NUMERICS and not verdict.numbers_checked:
        return Decision(
            False, "a numerics-changing lever needs a contract that compares numbers (none did)", None
        )
    if min(len(baseline), len(treatment)) < MIN_PAIRS:
        return Decision(False, f"fewer than {MIN_PAIRS} samples of each arm", None)
    iv = speedup_interval(baseline, treatment, paired)
    if iv.low >= 1 + min_gain:
        return Decision(
            True,
            f"{iv.speedup:.3f}x faster, 95% interval {iv.low:.3f}-{iv.high:.3f} clears {1 + min_gain:.2f}",
            iv,
        )
    return Decision(
        False,
        f"{iv.speedup:.3f}x, 95% interval {iv.low:.3f}-{iv.high:.3f}: lower bound below {1 + min_gain:.2f}",
        iv,
    )


def _pair_speedup(baseline: Sequence[float], treatment: Sequence[float]) -> tuple[list[float], float]:
    """Each pair's speedup (A time over B time) and their geometric mean."""
    ratios = [a / b for a, b in zip(baseline, treatment, strict=True)]
    return ratios, math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def clearly_slower(
    baseline: Sequence[float], treatment: Sequence[float], min_gain: float, rounds: int
) -> Decision | None:
    """A trial stopped before ``rounds`` pairs because the lever is clearly hurting the job: after two
    pairs at least (one of each order, so a drift cancels), every B measure at least ``min_gain``
    slower than every A measure. Each losing pair costs the job; there is no need to finish proving
    a loss (convergence issue: a live CPU experiment cost a run 49%). None: go on."""
    n = min(len(baseline), len(treatment))
    if n < 2 or n >= rounds:
        return None
    worst = min(treatment) / max(baseline)  # B's fastest against A's slowest: times, larger is slower
    if worst < 1 + min_gain:
        return None
    ratios, speedup = _pair_speedup(baseline, treatment)
    return Decision(
        False,
        f"{speedup:.3f}x: every B at least {worst:.2f}x slower than every A in {n} pair(s): stopped "
        f"before {rounds} pairs, not kept",
        Interval(speedup, min(ratios), max(ratios), n, True),
    )


def early_stop(
    baseline: Sequence[float], treatment: Sequence[float], worst: float, early_speedup: float, rounds: int
) -> Decision | None:
    """A promotion before ``rounds`` pairs: ``worst`` (the slowest B window's speed over the fastest
    A window's, over every pair so far) at least ``early_speedup`` — an effect far beyond the drift
    between windows or runs (±30% at most on the H200, launch-bound processes). None: go on."""
    if early_speedup <= 0 or worst < early_speedup or not baseline:
        return None
    ratios, speedup = _pair_speedup(baseline, treatment)
    return Decision(
        True,
        f"{speedup:.3f}x faster; every B window at least {worst:.2f}x faster than every A window "
        f"in {len(ratios)} pair(s), above the early bound {early_speedup:.2f}: decided before {rounds} pairs",
        Interval(speedup, worst, max(ratios), len(ratios), True),
    )
