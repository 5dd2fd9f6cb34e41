"""Runs that crashed under gitmd: the workloads (or launch keys) gitmd runs plainly until one runs clean.

A run that dies by a signal while gitmd had something in force on it (its shim, a capture window, a
trial arm, a policy) may have been killed by gitmd. Until a run of the same workload has ended
cleanly without gitmd's capture, its launches get no shim, no window and no trial.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from gitmd.store.db import Store

# Signals a job's launcher or scheduler sends to end it: its death by them is not a crash.
_STOPS = {signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGHUP}
# A shell reports a child killed by signal N as 128 + N; these are the ones a fault raises.
_FAULTS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP}


def crash_signal(exit_code: int | None) -> int:
    """The signal a run died of, judged from its exit status (negative: killed by -code, as Python's
    subprocess says; 128 + N for a fault reported through a shell); 0 when it did not die of one or
    was stopped on purpose (SIGTERM, SIGINT, SIGKILL, SIGHUP)."""
    if exit_code is None:
        return 0
    if exit_code < 0:
        sig = -exit_code
    elif exit_code - 128 in {int(s) for s in _FAULTS}:
        sig = exit_code - 128
    else:
        return 0
    return 0 if sig in {int(s) for s in _STOPS} else sig


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def keys(workload_id: str, launch_key: str) -> list[str]:
    return [
        k
        for k in (
            f"workload:{workload_id}" if workload_id else "",
            f"launch:{launch_key}" if launch_key else "",
        )
        if k
    ]


@dataclass(frozen=True)
class Suspect:
    key: str
    job_id: str
    reason: str
    since_ns: int


class SuspectCrashes:
    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, workload_id: str, launch_key: str) -> Suspect | None:
        ks = keys(workload_id, launch_key)
        if not ks:
            return None
        with self.store.reading() as db:
            cur = db.conn.execute(
                "SELECT key, job_id, reason, since_ns FROM suspect_crashes "
                f"WHERE key IN ({','.join('?' * len(ks))}) ORDER BY since_ns DESC LIMIT 1",
                ks,
            )
            row = cur.fetchone()
        return Suspect(*row) if row else None

    def mark(self, workload_id: str, launch_key: str, job_id: str, reason: str) -> None:
        now = time.time_ns()
        with self.store.transaction() as db:
            for k in keys(workload_id, launch_key):
                db.conn.execute(
                    "INSERT INTO suspect_crashes (key, job_id, reason, since_ns) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET job_id = excluded.job_id, reason = excluded.reason, "
                    "since_ns = excluded.since_ns",
                    (k, job_id, reason, now),
                )

    def clear(self, workload_id: str, launch_key: str) -> int:
        ks = keys(workload_id, launch_key)
        if not ks:
            return 0
        with self.store.transaction() as db:
            cur = db.conn.execute(f"DELETE FROM suspect_crashes WHERE key IN ({','.join('?' * len(ks))})", ks)
            return cur.rowcount
