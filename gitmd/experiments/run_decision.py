"""A launch trial's decision from its pairs of runs (gitmd/experiments/runs.py says what a trial
is): the full rounds by a paired t interval, the plausibility bound, and the early stops — a large
gain beyond each pair's command line's measured run-to-run spread, or a lever clearly slower."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gitmd.experiments.decide import Decision, Interval, clearly_slower, decide, speedup_interval
from gitmd.experiments.equivalence import Contract, Outputs, Verdict, evaluate
from gitmd.experiments.runs import LaunchTrial, line
from gitmd.levers.base import Risk

# An early stop needs every pair's gain beyond this many times the workload's run-to-run spread.
NOISE_MARGIN = 3.0


NOISE_RUNS = 3  # plain runs before a spread counts as measured


def run_noise(plain_runs_s: list[float]) -> float | None:
    """The workload's run-to-run spread: (max - min) / median of its plain runs' lengths (its
    trial's A arms and its earlier runs without a policy); None with fewer than NOISE_RUNS (two
    runs 0.1% apart on the H200, 2026-12-03, made a "0% spread" and a one-pair early stop with an
    interval 1% wide)."""
    xs = [x for x in plain_runs_s if x and x > 0]
    if len(xs) < NOISE_RUNS:
        return None
    return (max(xs) - min(xs)) / statistics.median(xs)


def decide_trial(
    t: LaunchTrial,
    contract: Contract,
    rounds: int,
    min_gain: float,
    early_speedup: float = 0.0,
    earlier_plain_s: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
    slower_plain_s: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
) -> Decision | None:
    """The decision once ``rounds`` pairs are complete; None while more runs are needed. Before
    that, after each complete pair: outputs that changed end the trial at once (reverted), and a
    lever is promoted early only when every pair's gain is at least ``early_speedup``, beyond
    NOISE_MARGIN times the workload's measured run-to-run spread (``earlier_plain_s`` and the A
    arms: no spread measured, no early stop), and within what its cause allows (``t.bound``). A
    full decision whose whole interval lies above the bound is a measurement error: reverted.
    ``slower_plain_s``: the runs the one-pair stop of a slower lever reads its spread from (None:
    ``earlier_plain_s``): on the launcher's clock, the line's runs that had the shim as well. Their
    lengths hold gitmd's own cost on some runs and not others, which only widens the spread: a
    stop reads it, never a promotion, and a line whose runs were all observed has one before its
    first pair (its B arm 31% slower, H200 2026-12-05, with no spread to stop on: the next run was
    a B arm again)."""
    pairs = t.pairs()
    if not pairs:
        return None
    used = pairs[:rounds]
    verdict = _verdict(contract, used)
    risk = t.lever_obj().risk
    a_s = [a["run_s"] for a, _ in used]
    b_s = [b["run_s"] for _, b in used]
    if not verdict.ok or (risk is Risk.NUMERICS and not verdict.numbers_checked):
        return decide(a_s, b_s, verdict, risk, min_gain, paired=True)  # a rejection, whatever the pairs
    if len(pairs) >= rounds:
        d = decide(a_s, b_s, verdict, risk, min_gain, paired=True)
        if d.interval is not None and d.interval.low > t.bound:
            return Decision(
                False,
                f"implausible: {d.interval.speedup:.3f}x (95% {d.interval.low:.3f}-{d.interval.high:.3f}) "
                f"is more than removing all of {t.cause} and the causes its lever addresses with it (at most "
                f"{100 * t.cause_share:.0f}% of the run) "
                f"allows ({t.bound:.2f}x): a measurement error, not a win",
                d.interval,
            )
        return d
    if len({line(a) for a, _ in used}) > 1:
        # pairs of other command lines are other lengths: each pair is held against its own A
        slower = clearly_slower(
            [1.0] * len(a_s), [b / a for a, b in zip(a_s, b_s, strict=True)], min_gain, rounds
        )
    else:
        slower = clearly_slower(a_s, b_s, min_gain, rounds)  # each losing run costs the job: stop
    if slower is not None:
        return slower
    ratios = [a / b for a, b in zip(a_s, b_s, strict=True)]
    noise = _spread(used, earlier_plain_s)
    wide = noise if slower_plain_s is None else _spread(used, slower_plain_s)
    if wide is not None and noise is not None:
        wide = max(wide, noise)
    if wide is not None:
        # slower in every pair beyond what the runs of its lines vary by: each B arm costs the job
        # a run, so the first such pair stops it (never a promotion: only what is not kept)
        slowest = 1 / max(ratios)
        need = max(1 + min_gain, 1 + NOISE_MARGIN * wide)
        iv = _noise_interval(ratios, wide)
        if slowest >= need and iv.high * (1 + min_gain) < 1:
            return Decision(
                False,
                f"{iv.speedup:.3f}x (95% {iv.low:.3f}-{iv.high:.3f}, from the workload's run-to-run "
                f"spread {100 * wide:.0f}%): every pair at least {slowest:.2f}x slower with it, beyond "
                f"{need:.2f}x: stopped after {len(ratios)} of {rounds} pairs, not kept",
                iv,
            )
    if early_speedup <= 0:
        return None
    if len(ratios) >= 2:
        # two pairs, one of each order, have a paired t interval of their own (1 degree of freedom:
        # t's 97.5% point is 12.7, so it takes pairs that agree): a workload whose plain runs were
        # all observed (their clock is not the trial's) needs no third A arm for its spread first
        iv = speedup_interval(a_s, b_s, paired=True)
        if min(ratios) >= early_speedup and iv.low >= 1 + min_gain and iv.speedup <= t.bound:
            return Decision(
                True,
                f"{iv.speedup:.3f}x faster by the runs' clock, 95% interval {iv.low:.3f}-{iv.high:.3f} "
                f"(paired t over {len(ratios)} pairs); every pair at least {min(ratios):.2f}x, beyond "
                f"{early_speedup:.2f}x and within the {t.bound:.2f}x its cause allows: decided after "
                f"{len(ratios)} of {rounds} pairs",
                iv,
            )
    if noise is None:
        return None  # the workload's run-to-run spread is not measured yet: no early stop
    iv = _noise_interval(ratios, noise)
    speedup, low, high = iv.speedup, iv.low, iv.high
    need = max(early_speedup, 1 + NOISE_MARGIN * noise)
    if min(ratios) < need or low < 1 + min_gain or speedup > t.bound:
        return None
    return Decision(
        True,
        f"{speedup:.3f}x faster by the runs' clock, 95% interval {low:.3f}-{high:.3f} (from the "
        f"workload's run-to-run spread {100 * noise:.0f}%); every pair at least {min(ratios):.2f}x, beyond "
        f"{need:.2f}x and within the {t.bound:.2f}x its cause allows: decided after {len(ratios)} of "
        f"{rounds} pairs",
        iv,
    )


def _geomean(ratios: list[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def _noise_interval(ratios: list[float], noise: float) -> Interval:
    """A real interval around the pairs' mean gain, from the measured run-to-run spread (taken as
    each run's standard deviation, which overstates it): a pair's log ratio varies by sqrt(2) x that."""
    mean = math.log(_geomean(ratios))
    half = 1.96 * math.sqrt(2) * math.log1p(noise) / math.sqrt(len(ratios))
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(ratios), True)


def _spread(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    earlier: Sequence[float] | Mapping[str, Sequence[float]] | None,
) -> float | None:
    """The run-to-run spread the pairs are judged against: with the plain runs of each of their
    command lines (``earlier``, by line), the largest of their lines' spreads, each from that line's
    plain runs and its pairs' A arms (None when a line's is not measured: a noisy line's pair was
    promoted on a quiet line's 2%); with one list, every pair's line alike."""
    if not isinstance(earlier, Mapping):
        return run_noise(list(earlier or []) + [a["run_s"] for a, _ in pairs])
    spreads = [
        run_noise(list(earlier.get(x, [])) + [a["run_s"] for a, _ in pairs if line(a) == x])
        for x in {line(a) for a, _ in pairs}
    ]
    return (
        None if not spreads or any(v is None for v in spreads) else max(v for v in spreads if v is not None)
    )


def _verdict(contract: Contract, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Verdict:
    failures: list[str] = []
    checked: set[str] = set()
    numbers = False
    for i, (a, b) in enumerate(pairs):
        v: Verdict = evaluate(contract, _outputs(a), _outputs(b))
        failures += [f"pair {i + 1}: {f}" for f in v.failures]
        checked |= set(v.checked)
        numbers = numbers or v.numbers_checked
    return Verdict(not failures, tuple(failures), tuple(sorted(checked)), numbers)


def _outputs(run: dict[str, Any]) -> Outputs:
    return Outputs(
        exit_status=run.get("exit_code"),
        metrics={k: tuple(v) for k, v in (run.get("metrics") or {}).items()},
    )
