"""`gitmctl tune`'s results as gitmd takes them (gitmd/experiments/tune.py): what a client sends is
checked whole before anything is stored, and what is stored stays small."""

from __future__ import annotations

import pytest

from gitmd.errors import InvalidArgumentError
from gitmd.experiments.tune import MAX_JOB_ID_CHARS, MAX_NOTES, MAX_TRIALS, TunedLever, tune_lever

PAIRS = (("A", 10.0, "j1"), ("B", 5.0, "j2"), ("B", 5.1, "j3"), ("A", 10.1, "j4"))


def test_a_tune_result_is_checked_and_bounded() -> None:
    """Hardening issue, item 5: tune records of 160 MB were stored in 2 s. Trials, notes and job ids
    are bounded; a well-formed result gives its pairs."""
    lever, (a, b) = tune_lever(TunedLever("tf32_override", {}, PAIRS, checked=("loss",)))
    assert lever.name == "tf32_override" and a == [10.0, 10.1] and b == [5.0, 5.1]
    with pytest.raises(InvalidArgumentError, match="at most 64 checks and failures"):
        tune_lever(TunedLever("tf32_override", {}, PAIRS, checked=("x",) * (MAX_NOTES + 1)))
    with pytest.raises(InvalidArgumentError, match="job id is at most"):
        long_id = "j" * (MAX_JOB_ID_CHARS + 1)
        tune_lever(TunedLever("tf32_override", {}, (("A", 1.0, long_id), ("B", 1.0, "j"))))
    with pytest.raises(InvalidArgumentError, match=f"at most {MAX_TRIALS} trials"):
        tune_lever(TunedLever("tf32_override", {}, PAIRS * (MAX_TRIALS // 4 + 1)))
    with pytest.raises(InvalidArgumentError, match="not a launch lever"):
        tune_lever(TunedLever("sched_priority", {}, PAIRS))
