"""Whether gitmd is paused (`gitmctl pause` / `resume`), kept across restarts."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gitmd.store.db import Store

MAX_REASON = 1024


@dataclass(frozen=True)
class PauseState:
    paused: bool
    by: str = ""
    reason: str = ""
    since_ns: int = 0


class Pause:
    """Read once from the store, then held in memory: the duty tick asks every second."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        with store.reading() as db:
            row = db.conn.execute("SELECT paused, by, reason, since_ns FROM pause WHERE id = 1").fetchone()
        self._state = PauseState(bool(row[0]), row[1], row[2], int(row[3])) if row else PauseState(False)

    @property
    def state(self) -> PauseState:
        with self._lock:
            return self._state

    @property
    def on(self) -> bool:
        return self.state.paused

    def set(self, paused: bool, by: str, reason: str = "") -> PauseState:
        st = PauseState(paused, by, reason[:MAX_REASON], time.time_ns())
        with self._lock:
            with self.store.transaction() as db:
                db.conn.execute(
                    "UPDATE pause SET paused = ?, by = ?, reason = ?, since_ns = ? WHERE id = 1",
                    (int(st.paused), st.by, st.reason, st.since_ns),
                )
            self._state = st
        return st
