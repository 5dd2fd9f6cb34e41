"""The decision rule under the H200's noise: identical runs differ by up to ±30% between processes,
much less within an interleaved pair. Simulated step times with those properties (a per-pair
machine state shared by A and B, plus a few % of noise within the pair)."""

from __future__ import annotations

import numpy as np
import pytest

from gitmd.experiments.decide import decide, speedup_interval
from gitmd.experiments.equivalence import Verdict
from gitmd.levers.base import Risk

OK = Verdict(True, (), ("stdout metric",), True)


def interleaved(true_speedup: float, pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = rng.uniform(0.7, 1.3, pairs)  # what each pair's processes got from the machine
    a = 100.0 * state * rng.normal(1, 0.02, pairs)
    b = 100.0 * state / true_speedup * rng.normal(1, 0.02, pairs)
    return a, b


def test_no_change_is_never_promoted_under_heavy_noise() -> None:
    promoted = sum(decide(*interleaved(1.0, 6, s), OK, Risk.SAFE).promote for s in range(300))
    assert promoted <= 3  # ~1% false promotions at most (the 95% interval is one-sided here: 2.5%)


def test_a_real_gain_is_promoted_and_a_slowdown_never() -> None:
    wins = sum(decide(*interleaved(1.15, 6, s), OK, Risk.SAFE).promote for s in range(200))
    assert wins >= 190
    assert not any(decide(*interleaved(0.8, 6, s), OK, Risk.SAFE).promote for s in range(200))


def test_unpaired_noise_is_why_pairs_matter() -> None:
    """The same 15% gain, compared without the pairing, is mostly lost in the ±30% noise."""
    wins = sum(decide(*interleaved(1.15, 6, s), OK, Risk.SAFE, paired=False).promote for s in range(200))
    assert wins < 100


def test_outputs_and_contracts_come_first() -> None:
    a, b = interleaved(2.0, 6, 0)
    changed = Verdict(False, ("stdout metric: value 3 differs",), (), True)
    d = decide(a, b, changed, Risk.SAFE)
    assert not d.promote and "outputs changed" in d.reason
    exit_only = Verdict(True, (), ("exit status",), False)
    d = decide(a, b, exit_only, Risk.NUMERICS)
    assert not d.promote and "compares numbers" in d.reason
    assert decide(a, b, exit_only, Risk.SAFE).promote
    assert not decide(a[:2], b[:2], OK, Risk.SAFE).promote


def test_interval_and_bad_input() -> None:
    iv = speedup_interval([10, 10, 10, 10], [5, 5, 5, 5])
    assert iv.speedup == pytest.approx(2.0) and iv.low == pytest.approx(2.0) and iv.paired
    with pytest.raises(ValueError):
        speedup_interval([1, float("nan"), 1], [1, 1, 1])


def test_a_lever_clearly_hurting_the_job_is_stopped_after_two_pairs() -> None:
    """Convergence issue: a live CPU experiment cost a run 49%. Every losing pair costs the job, so
    two pairs (one of each order) in which every B is at least min_gain slower than every A end the
    trial there; anything less clear goes on, and one pair never stops it."""
    from gitmd.experiments.decide import clearly_slower

    d = clearly_slower([10.0, 10.2], [12.0, 11.9], 0.03, 4)  # times: B ~17% slower in both pairs
    assert d is not None and not d.promote and "stopped before 4 pairs" in d.reason
    assert d.interval is not None and d.interval.speedup < 0.9 and d.interval.pairs == 2
    assert clearly_slower([10.0], [13.0], 0.03, 4) is None  # one pair: a drift could do that
    assert clearly_slower([10.0, 10.2], [10.1, 9.9], 0.03, 4) is None  # noise, not a loss
    assert clearly_slower([10.0, 10.2], [10.4, 12.0], 0.03, 4) is None  # B's best within 3% of A's worst
    assert clearly_slower([10.0] * 4, [12.0] * 4, 0.03, 4) is None  # all rounds run: the full decision


def test_few_noisy_pairs_do_not_make_a_false_gain() -> None:
    """Four pairs with 10% noise within each (a 2-core CI machine's 0.6-s windows), nothing changed:
    a percentile bootstrap over pairs promoted 4.5% of these (too narrow at four pairs; CI saw a
    null treatment promoted at 1.203x, 95% 1.065-1.347); Student's t on the pairs promotes about 1%,
    under the one-sided 2.5% the 95% interval allows."""
    promoted = 0
    for s in range(1000):
        rng = np.random.default_rng(s)
        state = rng.uniform(0.7, 1.3, 4)
        a, b = 100 * state * rng.normal(1, 0.1, 4), 100 * state * rng.normal(1, 0.1, 4)
        promoted += decide(a, b, OK, Risk.SAFE).promote
    assert promoted <= 20
    # the t interval is wider than the pairs' own spread: at four pairs, t(3) = 3.18 standard errors
    iv = speedup_interval([100, 110, 95, 105], [90, 92, 80, 85])
    r = np.log(np.array([100, 110, 95, 105]) / np.array([90, 92, 80, 85]))
    se = r.std(ddof=1) / 2
    assert np.log(iv.low) == pytest.approx(r.mean() - 3.182 * se, abs=0.02 * se + 1e-4)


def test_t_quantiles_are_on_the_safe_side_of_the_table() -> None:
    """The 97.5% quantiles of Student's t (any statistics table), for the pairs an experiment has:
    never below them (an interval never narrower than it should be), at most 0.02 above."""
    from gitmd.experiments.decide import t_quantile

    table = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    for df, exact in table.items():
        assert exact - 0.0005 <= t_quantile(0.975, df) <= exact + 0.02, df
