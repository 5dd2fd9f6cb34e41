"""Deciding a launch trial from its runs: the full rounds, or an early stop for a large effect."""

from __future__ import annotations

from typing import Any

from gitmd.experiments.equivalence import Check, Contract
from gitmd.experiments.runs import LaunchTrial, decide_trial

CONTRACT = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))


def run(arm: str, windows: list[float], loss: float = 1.0) -> dict[str, Any]:
    return {
        "job_id": f"j{arm}{windows[0]}",
        "arm": arm,
        "done": True,
        "step_ms": sorted(windows)[len(windows) // 2],
        "window_ms": windows,
        "exit_code": 0,
        "metrics": {r"loss=(\S+)": [loss]},
    }


def trial(*runs: dict[str, Any], lever: str = "tf32_override") -> LaunchTrial:
    return LaunchTrial(1, "w", lever, {}, "fp32_gemm", "running", list(runs))


def test_an_early_stop_needs_every_b_window_faster_than_every_a_window_by_the_bound() -> None:
    fast = trial(run("A", [10.0, 10.2, 9.9]), run("B", [2.0, 2.1, 2.05], 1.001))
    d = decide_trial(fast, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and d.promote and d.interval is not None
    assert d.interval.pairs == 1 and abs(d.interval.low - 9.9 / 2.1) < 1e-9
    # one B window as slow as the A windows (a stall, a co-tenant): not decided on one pair
    odd = trial(run("A", [10.0, 10.2, 9.9]), run("B", [2.0, 9.0, 2.05], 1.001))
    assert decide_trial(odd, CONTRACT, 3, 0.03, 1.5) is None
    assert decide_trial(fast, CONTRACT, 3, 0.03, 0.0) is None  # early stops off
    assert decide_trial(trial(run("A", [10.0])), CONTRACT, 3, 0.03, 1.5) is None  # no pair yet


def test_changed_outputs_end_the_trial_at_the_first_pair() -> None:
    moved = trial(run("A", [10.0]), run("B", [2.0], 1.05))
    d = decide_trial(moved, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "outputs changed" in d.reason


def test_a_numerics_lever_without_numbers_compared_is_not_promoted_early() -> None:
    exit_only = Contract((Check("exit_status"),))
    d = decide_trial(trial(run("A", [10.0]), run("B", [2.0])), exit_only, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "compares numbers" in d.reason
    # a lever that cannot change numbers may stop early on the exit status alone
    d = decide_trial(trial(run("A", [10.0]), run("B", [2.0]), lever="cpu_threads"), exit_only, 3, 0.03, 1.5)
    assert d is not None and d.promote
