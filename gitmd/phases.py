"""How long the launcher's two calls spend in the loop, phase by phase: each is on a job's path
(the registration before its exec, the exit report before the launcher can exit with the job's
status), so their time is a part of what gitmd costs a run that the run's own clock never sees.
A call slower than SLOW_S says where its time went in the log; the exit report's time is kept
with the job too, in its cost record (`exit_ms`, gitmd/loop/cost.py)."""

from __future__ import annotations

import logging
import time

SLOW_S = 0.05  # a launcher's call slower than this is logged with its phases


class Phases:
    """Wall time per named phase of one call, in order: ``mark(name)`` ends the phase begun at the
    previous mark (or at creation) and names it."""

    def __init__(self) -> None:
        self._t0 = self._last = time.monotonic()
        self.spent: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.spent.append((name, now - self._last))
        self._last = now

    @property
    def total_s(self) -> float:
        return self._last - self._t0

    def said(self) -> str:
        """The phases that took a millisecond or more, e.g. "untrack 41 ms, cost 3 ms"."""
        return ", ".join(f"{n} {1000 * s:.0f} ms" for n, s in self.spent if s >= 0.0005) or "none over 1 ms"

    def log_if_slow(self, log: logging.Logger, what: str) -> None:
        if self.total_s >= SLOW_S:
            log.info("%s took %.0f ms (%s)", what, 1000 * self.total_s, self.said())
