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


def test_unary_calls_in_flight_are_bounded_per_caller_and_leave_workers_for_root() -> None:
    """Hardening issue, item 4: a user's flood of slow unary calls held every worker and root's
    status waited. An unprivileged caller may have 4 calls in flight, all of them together what the
    streams leave less 2; root, admins and schedulers are never refused (the reserve is theirs)."""
    from gitmd.api.streams import CallSlots

    slots = CallSlots(workers=16, per_caller=4)
    assert slots.total == 16 - 8 - 2
    held = [slots.hold(ALICE, "ExplainCapture") for _ in range(4)]
    for h in held:
        h.__enter__()
    with (
        pytest.raises(ResourceExhaustedError, match="has 4 calls in flight"),
        slots.hold(ALICE, "GetStatus"),
    ):
        pass
    carol = Caller("uid 1003 (carol)", frozenset(), uid=1003)
    with slots.hold(BOB, "a"), slots.hold(BOB, "b"):  # 6 in all: the unprivileged share is full
        full = pytest.raises(ResourceExhaustedError, match="serving 6 calls of other users")
        with full, slots.hold(carol, "c"):
            pass
        root = Caller("uid 0 (root)", frozenset(), uid=0)
        scheduler = Caller("tls:CN=slurm-ctl", frozenset({"scheduler"}))
        with slots.hold(root, "GetStatus"), slots.hold(scheduler, "RegisterJob"):
            pass  # never refused
    for h in held:
        h.__exit__(None, None, None)
    with slots.hold(carol, "c"):  # freed
        pass
