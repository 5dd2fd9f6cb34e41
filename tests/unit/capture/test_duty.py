import pytest

from gitmd.capture import duty
from gitmd.capture.duty import MAX_PERIOD_S, next_period, slowdown_in_window


def test_a_quiet_job_keeps_the_configured_period() -> None:
    # a training step: ~2000 launches/s costs ~1.2% inside a window; 2 s of 30 s is well under 1%
    assert next_period(kernels=4000, window_s=2.0, every_s=30.0, budget=0.01, launch_cost_us=6.0) == 30.0


def test_a_launch_bound_job_gets_windows_less_often() -> None:
    # the H200 launch-bound loop: ~116k launches/s -> ~70% slower while a window is open
    frac = slowdown_in_window(232_000, 2.0, 6.0)
    assert frac == pytest.approx(0.696)
    period = next_period(232_000, 2.0, 30.0, 0.01, 6.0)
    assert period == pytest.approx(2.0 * 0.696 / 0.01)
    assert frac * 2.0 / period == pytest.approx(0.01)  # amortised exactly at the budget


def test_bounds() -> None:
    assert next_period(10**12, 2.0, 30.0, 0.01, 6.0) == MAX_PERIOD_S
    assert next_period(0, 0.0, 30.0, 0.01, 6.0) == 30.0


def test_a_short_first_window_sets_the_period_of_the_full_ones() -> None:
    # 0.25 s saw 29k launches (the launch-bound loop): the 2-s windows to come are what the
    # period is stretched for, not the short one
    short = next_period(29_000, 0.25, 30.0, 0.01, 6.0, coming_s=2.0)
    assert short == pytest.approx(next_period(232_000, 2.0, 30.0, 0.01, 6.0))
    assert short > 130 and next_period(29_000, 0.25, 30.0, 0.01, 6.0) == 30.0  # as if all were short


def test_a_windows_record_cap_is_what_the_budget_allows_over_the_period() -> None:
    from gitmd.capture.duty import MIN_WINDOW_RECORDS, window_records

    assert window_records(30.0, 0.01, 6.0) == 50_000  # 0.3 s of slowdown at 6 us a launch
    assert window_records(138.0, 0.01, 6.0) == 230_000  # a stretched period affords a full window
    assert window_records(2.0, 0.01, 6.0) == MIN_WINDOW_RECORDS  # never too few to show a step
    assert window_records(30.0, 0.0, 6.0) is None and window_records(30.0, 0.01, 0.0) is None


def test_the_settle_default_is_the_shims_detach_age() -> None:
    """A settled job's first window comes once its processes are as old as the shim's detach rule
    (shim/src/detach_rule.h) requires for the one detach that ends their observation."""
    import re
    from pathlib import Path

    from gitmd.config import CaptureConfig

    rule = (Path(__file__).resolve().parents[3] / "shim" / "src" / "detach_rule.h").read_text()
    min_ms = int(re.search(r"#define GITM_DETACH_MIN_AGE_MS (\d+)", rule).group(1))  # type: ignore[union-attr]
    assert min_ms / 1000 == CaptureConfig().settle_s


def test_a_window_of_a_known_step_needs_only_its_steps() -> None:
    """Once the step is known, a window needs WINDOW_STEPS steps' records, copies and syncs
    included, not its full length; unknown step, no such cap."""
    assert duty.step_records(150, 16_500, 15_000) == int(duty.WINDOW_STEPS * 150 * 1.1) + 1
    assert duty.step_records(150, 10_000, 15_000) == duty.WINDOW_STEPS * 150 + 1  # never below its kernels
    assert duty.step_records(0, 100, 100) is None and duty.step_records(10, 100, 0) is None
