"""Capture windows: discover each job's rings, open a window on all of them, close it, drain.

One window per job at a time (a per-job lock). Between windows CUPTI activity is off in every
shim. A process is observed in one stretch: once gitmd has seen enough of it, ``end_observation``
tells its shim (which detaches CUPTI then only with capture.detach_cupti: detaching raced with
other threads' launches and crashed jobs), and it gets no windows after that; a process that never
had a window costs nothing.

A closed window (WindowResult, a ProcessWindow per process) is plain data in gitmd.records, which
analysis reads.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gitmd.capture.abi import Abi
from gitmd.capture.context import ContextSampler, WindowContext
from gitmd.capture.decode import MAX_WINDOW_RECORDS, Decoded, drain_decode
from gitmd.capture.process import ProcessCapture
from gitmd.capture.ranks import Rank, rank_of
from gitmd.capture.ring import Ring, RingError, RingNotReady, RingStatus
from gitmd.jobs.liveness import ProcessWatcher, ring_owner_problem
from gitmd.records import ProcessWindow, WindowResult

log = logging.getLogger(__name__)

# a job's processes captured at most (ring files beyond are ignored, and said once): a job's folder
# is its user's to fill, and each new file is opened at every discovery until it is ready
MAX_RINGS_PER_JOB = 256
CAP_POLL_S = 0.05  # how often a window with a record cap reads its processes' counters
# a capped window lasts at least this long: the Granger tests of host contention need 20 bins of
# the 25-ms context samples (gitmd/analysis/causality.py), and the window's open takes ~20 ms
CAP_MIN_S = 0.75

KIND_BITS = {
    "kernel": 1,
    "memcpy": 2,
    "memset": 4,
    "sync": 8,
    "memory": 16,
    "payload": 32,
    "streams": 64,
    "hostsrc": 128,
}


@dataclass
class JobCapture:
    job_id: str
    directory: Path
    procs: dict[str, ProcessCapture] = field(default_factory=dict)
    bad: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    windows: int = 0
    opened: int = 0  # windows opened, counted as they open (a window the job's end cut short counts)
    last: WindowResult | None = None
    next_due_mono: float = 0.0  # the duty cycle's next window for this job
    period_s: float = 0.0
    too_many: bool = False  # more ring files than MAX_RINGS_PER_JOB were seen (said once)
    # set when the job ends (untrack): an open window stops at its next poll, and the rings are
    # closed once it lets go of ``lock``; the job's end never waits for a window (a 2-s window
    # held `gitmctl run`'s exit report: a 1.7-s program took 3.7 s, H200 2026-12-04)
    ended: threading.Event = field(default_factory=threading.Event)


BAD_RINGS_LOGGED = 5  # a job's ignored ring files each logged; past that, one line says so


def _bad_ring(jc: JobCapture, what: str) -> None:
    """A ring file of the job ignored: logged for the first BAD_RINGS_LOGGED of the job, then once
    that the rest are not (a user's 5,000 bad files wrote 5,000 lines into root's log: hostile-user
    run, 2026-12-04); at debug level always."""
    n = len(jc.bad)
    if n <= BAD_RINGS_LOGGED:
        log.warning("capture: %s", what)
    elif n == BAD_RINGS_LOGGED + 1:
        log.warning(
            "capture: job %s has more than %d ring files gitmd ignores; the rest are not logged",
            jc.job_id, BAD_RINGS_LOGGED,
        )  # fmt: skip
    log.debug("capture: %s", what)


class CaptureManager:
    def __init__(
        self,
        abi: Abi,
        kinds: tuple[str, ...],
        flush_interval_ms: int,
        watcher: ProcessWatcher | None = None,
        context: Callable[[], ContextSampler] | None = None,
    ) -> None:
        self.abi = abi
        self.context = context
        self.watcher = watcher
        self.kinds_mask = sum(KIND_BITS[k] for k in kinds)
        self.flush_interval_ms = flush_interval_ms
        self._jobs: dict[str, JobCapture] = {}
        self._lock = threading.Lock()
        self._next_window = 1
        self._open: set[str] = set()

    # -- jobs ----------------------------------------------------------------------------------
    def track(self, job_id: str, directory: Path) -> None:
        with self._lock:
            self._jobs.setdefault(job_id, JobCapture(job_id, directory))

    def untrack(self, job_id: str) -> None:
        """The job ended: forget it. Never waits for its open window: that window stops at its next
        poll and closes the rings itself (its drain reads them until then)."""
        with self._lock:
            jc = self._jobs.pop(job_id, None)
        if jc is None:
            return
        jc.ended.set()
        if jc.lock.acquire(blocking=False):
            try:
                _close_rings(jc)
            finally:
                jc.lock.release()
        else:  # a window holds it: closed as soon as that window is done with them
            threading.Thread(target=_close_when_free, args=(jc,), name="ring-close", daemon=True).start()

    @property
    def windows_opened(self) -> int:
        """Windows opened since gitmd started (window ids are handed out one per window, from 1)."""
        return self._next_window - 1

    def job_ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def get(self, job_id: str) -> JobCapture | None:
        with self._lock:
            return self._jobs.get(job_id)

    def discover(self, jc: JobCapture) -> None:
        """Map ring files that appeared since last time; bad files are logged once and skipped."""
        if jc.ended.is_set():
            return  # the job ended: nothing new is opened (nothing would close it)
        try:
            entries = list(os.scandir(jc.directory))
            owner = os.lstat(jc.directory).st_uid  # the job's user (gitmd made it so, mode 0700)
        except OSError:
            return
        fresh = [
            e
            for e in entries
            if e.name.startswith("ring-") and e.name.endswith(".gitm") and e.name not in jc.procs
            and e.name not in jc.bad
        ]  # fmt: skip
        room = MAX_RINGS_PER_JOB - sum(1 for pc in jc.procs.values() if pc.exited is not True)
        if len(fresh) > room:  # 20,000 empty ring files made every GetJob take 13 s (hardening, item 4)
            if not jc.too_many:
                jc.too_many = True
                log.warning(
                    "capture: job %s's folder holds %d ring files not yet mapped; at most %d processes "
                    "of a job are captured, the rest ignored",
                    jc.job_id, len(fresh) + len(jc.procs), MAX_RINGS_PER_JOB,
                )  # fmt: skip
            fresh = sorted(fresh, key=lambda e: e.name)[: max(0, room)]
        for entry in fresh:
            name = entry.name
            if not entry.is_file(follow_symlinks=False):
                jc.bad.add(name)
                _bad_ring(jc, f"{entry.path} is not a regular file; ignored")
                continue
            try:
                ring = Ring(entry.path, self.abi, owner_uid=owner)
                why = ring_owner_problem(ring.pid, ring.start_time_ticks, *ring.inode, owner)
                if why:
                    ring.close()
                    raise RingError(f"{entry.path}: {why}: not trusted")
                pc = ProcessCapture(ring, rank=rank_of(ring.pid))  # its environment at exec
                jc.procs[name] = pc
                if self.watcher is not None:
                    pc.exited = False
                    if not self.watcher.watch(
                        pc.ring.pid, pc.ring.start_time_ticks, functools.partial(_ended, pc)
                    ):
                        pc.exited = True
            except RingNotReady:
                continue
            except RingError as e:
                jc.bad.add(name)
                _bad_ring(jc, f"ignoring {e}")

    def observable(self, job_id: str) -> bool:
        """A live process of the job may still be given a window."""
        jc = self.get(job_id)
        if jc is None:
            return False
        with jc.lock:
            self.discover(jc)
            return any(pc.observable for pc in jc.procs.values())

    def end_observation(self, job_id: str, timeout_s: float = 2.0) -> dict[int, str]:
        """Every live process of the job that has had a window is told its observation is over
        (GITM_KNOB_DETACH): its shim detaches CUPTI once and is given no window again. A process
        that never had a window is left alone (it pays nothing). pid -> what its shim answered."""
        jc = self.get(job_id)
        if jc is None:
            return {}
        out: dict[int, str] = {}
        with jc.lock:
            for pc in jc.procs.values():
                if pc.observed or not pc.alive or pc.status().windows_opened == 0:
                    continue
                pc.observed = True  # whatever the answer: no window after this
                try:
                    rc, res = pc.ring.knob(self.abi.const("GITM_KNOB_DETACH"), (), timeout_s)
                except RingError as e:
                    pc.fail(e)
                    continue
                except (TimeoutError, KeyError, OSError) as e:
                    out[pc.ring.pid] = f"not acknowledged: {e}"
                    continue
                out[pc.ring.pid] = (
                    f"error {rc}"
                    if rc
                    else {0: "stays attached", 1: "detached", 2: "detach owed"}.get(res[0], "?")
                )
        return out

    def processes(self, job_id: str, wait: bool = True) -> list[tuple[RingStatus, bool]]:
        """The job's processes: each ring's header and whether its process is alive.

        ``wait=False`` (views: `gitmctl job`, `gitmctl jobs`, the untracked list) never waits for
        the job's lock: while a window (or another reader) holds it, each process's status as last
        read stands in (ProcessCapture.seen). A window holds the job for its length and its
        acknowledgements (seconds on a ring nobody serves): a user's ring no shim answered held
        root's `gitmctl job` past its 10-s timeout and everyone's `gitmctl jobs` 6-8 s (hostile-user
        run, 2026-12-04). The loop's own callers wait: they decide on what the rings say now (a job
        whose first ring is being found must not look like one with no process)."""
        jc = self.get(job_id)
        if jc is None:
            return []
        if not jc.lock.acquire(blocking=wait):
            # the lock's holder writes ``procs`` and each ``last``; a copy of the values is taken
            # whole under the GIL, and a status is an immutable record
            return [(pc.seen(), pc.alive) for pc in list(jc.procs.values())]
        try:
            self.discover(jc)
            return [(pc.status(), pc.alive) for pc in jc.procs.values()]
        finally:
            jc.lock.release()

    def ranks(self, job_id: str) -> dict[int, Rank]:
        """pid -> rank of the job's processes launched as ranks of a distributed job (read once,
        when the process was found: its environment at exec). Never waits for the job's lock."""
        jc = self.get(job_id)
        if jc is None:
            return {}
        return {pc.ring.pid: pc.rank for pc in list(jc.procs.values()) if pc.rank is not None}

    def lifetime_ns(self, job_id: str) -> tuple[int, int] | None:
        """(first CUDA initialisation, last exit) of the job's processes, CLOCK_REALTIME: from the
        rings' creation and the watcher's exit times (now for a process still alive or not watched).
        None: no ring."""
        jc = self.get(job_id)
        if jc is None:
            return None
        with jc.lock:
            self.discover(jc)
            procs = list(jc.procs.values())
        born = [pc.status().created_real_ns for pc in procs]
        born = [b for b in born if b > 0]
        if not born:
            return None
        now = time.time_ns()
        ends = [pc.exited_real_ns if pc.exited and pc.exited_real_ns else now for pc in procs]
        return min(born), max(ends)

    def ring_paths(self, job_id: str) -> dict[int, str]:
        """pid -> ring file of the job's live processes (for the live shim levers' knobs)."""
        jc = self.get(job_id)
        if jc is None:
            return {}
        return {pc.ring.pid: str(pc.ring.path) for pc in list(jc.procs.values()) if pc.alive}

    # -- windows -------------------------------------------------------------------------------
    def capture(
        self,
        job_id: str,
        duration_s: float,
        ack_timeout_s: float = 3.0,
        max_records: int | None = None,
    ) -> WindowResult:
        """One window on every live process of the job. ``max_records``: the window closes early once
        its processes have written this many records (a duty window's launch budget: a job whose
        launch rate rose since the last window, or was never seen, cannot cost more than that), but
        not before CAP_MIN_S (what the window's analysis needs). Processes whose observation has
        ended get no window."""
        mask = self.kinds_mask
        jc = self.get(job_id)
        if jc is None:
            raise KeyError(job_id)
        with jc.lock:
            if jc.ended.is_set():
                raise KeyError(job_id)  # ended while this waited for the lock: its rings are closed
            with self._lock:
                window_id = self._next_window
                self._next_window += 1
            self.discover(jc)
            notes: list[str] = []
            live = {n: pc for n, pc in jc.procs.items() if pc.observable}
            ended = [pc.ring.pid for pc in jc.procs.values() if pc.observed and pc.alive]
            if ended:
                notes.append(
                    f"pid(s) {', '.join(map(str, ended))}: observation ended, no window any more "
                    "(capture.session_windows)"
                )
            start_real = time.time_ns()
            seqs = _each(
                live,
                lambda pc: (pc.ring.discard(), pc.ring.open_window(window_id, mask, self.flush_interval_ms))[
                    1
                ],
            )
            self._wait_acks(live, seqs, ack_timeout_s, notes, "open")
            if live:
                jc.opened += 1
            sampler = self.context() if self.context is not None else None
            if sampler is not None:
                sampler.start([pc.ring.pid for pc in live.values()])
            base = _each(live, lambda pc: pc.ring.status().records_written)
            try:
                opened = time.monotonic()
                deadline = opened + duration_s
                while (left := deadline - time.monotonic()) > 0:
                    if jc.ended.wait(min(left, 0.5 if max_records is None else CAP_POLL_S)):
                        notes.append(f"closed after {time.monotonic() - opened:.2f} s: the job ended")
                        break
                    if live and not any(pc.alive for pc in live.values()):
                        notes.append(f"closed after {time.monotonic() - opened:.2f} s: its processes exited")
                        break
                    _each(live, lambda pc: pc.ring.heartbeat())
                    self.discover(jc)  # processes started during the window join it
                    for n, pc in jc.procs.items():
                        if n not in live and pc.observable:
                            joined = {n: pc}
                            got = _each(joined, lambda pc: pc.ring.status().records_written)
                            seq = _each(
                                joined,
                                lambda pc: pc.ring.open_window(window_id, mask, self.flush_interval_ms),
                            )
                            if joined:
                                live[n], base[n], seqs[n] = pc, got[n], seq[n]
                    if max_records is not None:
                        now_written = _each(live, lambda pc: pc.ring.status().records_written)
                        written = sum(now_written[n] - base[n] for n in live)
                        if written >= max_records and time.monotonic() - opened >= CAP_MIN_S:
                            notes.append(
                                f"closed after {time.monotonic() - opened:.2f} s of {duration_s:g} s: "
                                f"{written} records reached the window's launch budget ({max_records})"
                            )
                            break
            finally:  # the sampler thread never outlives its window
                context = sampler.stop() if sampler is not None else WindowContext.empty()
            notes += context.notes
            seqs = _each(live, lambda pc: pc.ring.close_window())
            self._wait_acks(live, seqs, ack_timeout_s, notes, "close")
            end_real = time.time_ns()
            procs = []
            for pc in list(live.values()):
                try:
                    decoded = drain_decode(pc.ring, pc.names, self.abi)
                    beyond = pc.ring.discard()  # past the cap: given back unread
                    if beyond:
                        cap = MAX_WINDOW_RECORDS
                        notes.append(f"pid {pc.ring.pid}: {beyond} records beyond {cap} dropped")
                    status = pc.ring.status()
                    pairs = _clock_pairs(pc.ring, decoded)
                except RingError as e:
                    pc.fail(e)
                    notes.append(f"pid {pc.ring.pid}: {e}")
                    continue
                if status.status in ("stepped_aside", "off"):
                    notes.append(f"pid {status.pid}: {status.status}: {status.reason}")
                elif empty := pc.delivered(decoded, status):
                    notes.append(empty)
                procs.append(ProcessWindow(pc.ring.pid, status, decoded, pairs))
            result = WindowResult(job_id, window_id, start_real, end_real, procs, notes, context)
            jc.windows += 1
            jc.last = result
            return result

    def _wait_acks(
        self,
        live: dict[str, ProcessCapture],
        seqs: dict[str, int],
        timeout_s: float,
        notes: list[str],
        what: str,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        pending = dict(seqs)
        while pending and time.monotonic() < deadline:
            for n in list(pending):
                pc = live[n]
                try:
                    done = not pc.alive or pc.ring.acked(pending[n])
                except RingError as e:
                    pc.fail(e)
                    done = True
                if done:
                    del pending[n]
            if pending:
                time.sleep(0.01)
        for n in pending:
            notes.append(
                f"pid {live[n].ring.pid}: the shim did not acknowledge the window {what} in {timeout_s} s"
            )

    def close_all_windows(self) -> None:
        """At daemon stop: close any window a crash of ours would otherwise leave to the heartbeat."""
        with self._lock:
            jobs = list(self._jobs.values())
        for jc in jobs:
            for pc in list(jc.procs.values()):
                try:
                    if int(pc.ring.ctl["window_open"]):
                        pc.ring.close_window()
                except (TypeError, ValueError, RingError):
                    pass


def _close_rings(jc: JobCapture) -> None:
    """With ``jc.lock`` held."""
    for pc in jc.procs.values():
        pc.ring.close()


def _close_when_free(jc: JobCapture) -> None:
    """An ended job's rings, closed once the window that holds them is done with them."""
    with jc.lock:
        _close_rings(jc)


def _each(procs: dict[str, ProcessCapture], fn: Callable[[ProcessCapture], Any]) -> dict[str, Any]:
    """``fn`` on each process's ring; a ring that fails (its file shrank) is dropped from ``procs``
    and ignored from then on, the others go on."""
    out = {}
    for n, pc in list(procs.items()):
        try:
            out[n] = fn(pc)
        except RingError as e:
            pc.fail(e)
            del procs[n]
    return out


def _ended(pc: ProcessCapture, _pid: int) -> None:
    pc.exited_real_ns = time.time_ns()
    pc.exited = True


def _clock_pairs(ring: Ring, decoded: Decoded) -> np.ndarray:
    header = ring.clock_pairs()
    recs = decoded.clocks
    from_records = np.zeros(len(recs), dtype=header.dtype)
    from_records["cupti_ns"] = recs["start_ns"]
    from_records["mono_ns"] = recs["end_ns"]
    from_records["real_ns"] = recs["real_ns"]
    return np.concatenate([header, from_records])
