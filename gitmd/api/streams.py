"""The gRPC server's worker threads, shared so that no local user can take them all (hardening
issue, item 4).

Open streams (WatchJobs, WatchTelemetry, TraceJob) each hold a worker for as long as they last.
Left unbounded, one user's 16 watches took every worker and root's `gitmctl status` timed out. A
caller may hold PER_CALLER streams, and all callers together at most half the workers.

Unary calls hold a worker while they run: a user's flood of slow calls (explains, traces of a
capture, listings) held every worker just the same. A caller that is not root and acts for no one
else (an admin, a scheduler) may have PER_CALLER_CALLS calls in flight, and such callers together
what the streams leave less RESERVED workers, which stay for root, admins and schedulers: root's
`gitmctl status` always finds a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gitmd.auth.access import Caller
from gitmd.errors import ResourceExhaustedError

PER_CALLER = 4
PER_CALLER_CALLS = 4
RESERVED = 2  # workers only root, admins and schedulers' unary calls may take


class _Slots:
    """Places held per caller and by all callers together; a caller past either is refused
    (RESOURCE_EXHAUSTED) with what to do, and a place is given back however the call ends."""

    mine_full = ""  # the refusal of a caller at its own limit: {caller} {n}

    def __init__(self, total: int, per_caller: int) -> None:
        self.total = max(1, total)
        self.per_caller = per_caller
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def exempt(self, caller: Caller) -> bool:
        return False

    def _full(self, rpc: str) -> str:
        raise NotImplementedError

    @contextmanager
    def hold(self, caller: Caller, rpc: str) -> Iterator[None]:
        if self.exempt(caller):
            yield
            return
        key = caller.name if caller.uid is None else f"uid:{caller.uid}"
        with self._lock:
            mine = self._open.get(key, 0)
            if mine >= self.per_caller:
                raise ResourceExhaustedError(f"{rpc}: " + self.mine_full.format(caller=caller.name, n=mine))
            if sum(self._open.values()) >= self.total:
                raise ResourceExhaustedError(self._full(rpc))
            self._open[key] = mine + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._open.get(key, 1) - 1
                if left:
                    self._open[key] = left
                else:
                    self._open.pop(key, None)

    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())


class StreamSlots(_Slots):
    """Open streams: PER_CALLER a caller, half the workers in all."""

    mine_full = (
        "{caller} has {n} streams open, the most one caller may hold; "
        "close one (a `gitmctl ... --watch` or a trace) first"
    )

    def __init__(self, workers: int, per_caller: int = PER_CALLER) -> None:
        super().__init__(workers // 2, per_caller)

    def _full(self, rpc: str) -> str:
        return f"{rpc}: gitmd has {self.total} streams open, the most it serves at once; try again later"


class CallSlots(_Slots):
    """Unary calls in flight, per caller and for every unprivileged caller together."""

    mine_full = "{caller} has {n} calls in flight, the most one caller may have; wait for one to return"

    def __init__(self, workers: int, per_caller: int = PER_CALLER_CALLS) -> None:
        super().__init__(workers - max(1, workers // 2) - RESERVED, per_caller)

    def exempt(self, caller: Caller) -> bool:
        return caller.is_root or caller.acts_for_others  # the reserved workers are theirs

    def _full(self, rpc: str) -> str:
        return f"{rpc}: gitmd is serving {self.total} calls of other users; try again in a moment"
