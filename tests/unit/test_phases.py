"""gitmd/phases.py: the launcher's calls timed phase by phase."""

from __future__ import annotations

import logging
import time

import pytest

from gitmd.phases import SLOW_S, Phases


def test_phases_name_each_span_and_only_a_slow_call_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.phases")
    ph = Phases()
    ph.mark("quick")
    with caplog.at_level(logging.INFO, logger="test.phases"):
        ph.log_if_slow(log, "a call")
    assert not caplog.records and ph.said() == "none over 1 ms"
    time.sleep(SLOW_S)
    ph.mark("slow")
    with caplog.at_level(logging.INFO, logger="test.phases"):
        ph.log_if_slow(log, "a call")
    assert [n for n, _ in ph.spent] == ["quick", "slow"] and ph.total_s >= SLOW_S
    (msg,) = [r.getMessage() for r in caplog.records]
    assert msg.startswith("a call took ") and "slow " in msg and "quick" not in msg
