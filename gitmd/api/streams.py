"""Open streams (WatchJobs, WatchTelemetry, TraceJob) each hold one of the gRPC server's worker
threads for as long as they last. Left unbounded, one user's 16 watches took every worker and
root's `gitmctl status` timed out (hardening issue, item 4). A caller may hold PER_CALLER streams,
and all callers together at most half the workers, so unary calls always find a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gitmd.auth.access import Caller
from gitmd.errors import ResourceExhaustedError

PER_CALLER = 4


class StreamSlots:
    def __init__(self, workers: int, per_caller: int = PER_CALLER) -> None:
        self.total = max(1, workers // 2)
        self.per_caller = per_caller
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, caller: Caller, rpc: str) -> Iterator[None]:
        key = caller.name if caller.uid is None else f"uid:{caller.uid}"
        with self._lock:
            mine = self._open.get(key, 0)
            if mine >= self.per_caller:
                raise ResourceExhaustedError(
                    f"{rpc}: {caller.name} has {mine} streams open, the most one caller may hold; "
                    "close one (a `gitmctl ... --watch` or a trace) first"
                )
            if sum(self._open.values()) >= self.total:
                raise ResourceExhaustedError(
                    f"{rpc}: gitmd has {self.total} streams open, the most it serves at once; try again later"
                )
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
