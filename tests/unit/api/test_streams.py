"""Open streams are bounded per caller and in all, so unary calls always find a worker thread."""

from __future__ import annotations

import pytest

from gitmd.api.streams import StreamSlots
from gitmd.auth.access import Caller
from gitmd.errors import ResourceExhaustedError

ALICE = Caller("uid 1001 (alice)", frozenset(), uid=1001)
BOB = Caller("uid 1002 (bob)", frozenset(), uid=1002)
REMOTE = Caller("tls:CN=slurm-ctl", frozenset())


def test_a_caller_holds_at_most_per_caller_streams_and_all_at_most_half_the_workers() -> None:
    slots = StreamSlots(workers=16, per_caller=4)
    held = [slots.hold(ALICE, "WatchJobs") for _ in range(4)]
    for h in held:
        h.__enter__()
    with (
        pytest.raises(ResourceExhaustedError, match="has 4 streams open, the most one caller may hold"),
        slots.hold(ALICE, "WatchJobs"),
    ):
        pass
    with slots.hold(BOB, "WatchTelemetry"), slots.hold(REMOTE, "WatchJobs"):  # others still may
        assert slots.open() == 6
    held.pop().__exit__(None, None, None)  # one closed: alice may open one again
    with slots.hold(ALICE, "WatchJobs"):
        assert slots.open() == 4
    for h in held:
        h.__exit__(None, None, None)
    assert slots.open() == 0
    small = StreamSlots(workers=4, per_caller=4)  # two streams in all
    with (
        small.hold(ALICE, "a"),
        small.hold(BOB, "b"),
        pytest.raises(ResourceExhaustedError, match="has 2 streams open, the most it serves"),
        small.hold(REMOTE, "c"),
    ):
        pass
