"""Process exits as they happen: one pidfd per watched process, all in one epoll, one thread.

A pidfd names a process, not a pid number, so a reused pid can never pass for the process that
ended. After opening it, the process's start time is compared with the one the ring recorded, so a
pid reused before we got to it is refused too.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def start_ticks(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def ring_owner_problem(pid: int, ticks: int, dev: int, ino: int, uid: int) -> str:
    """Why the process a ring names cannot be taken as that ring's ("" : it can). A ring's header is
    written by the job's user, so its pid proves nothing by itself: a ring naming another user's (or
    root's) process would have gitmd list that process under the job and act on it. The process
    must run as ``uid`` and map this very file (device ``dev``, inode ``ino``), which the shim does
    before it writes the header's magic. A pid not running with the stated start time is no problem
    here: such a ring is of an ended process, which gitmd never acts on."""
    if pid <= 0:
        return f"names no process (pid {pid})"
    if start_ticks(pid) != ticks:
        return ""
    base = Path(f"/proc/{pid}")
    try:
        status = (base / "status").read_text().splitlines()
        uid_line = next(x for x in status if x.startswith("Uid:"))
        ppid = int(next(x for x in status if x.startswith("PPid:")).split()[1])
        maps = (base / "maps").read_text()
    except (FileNotFoundError, ProcessLookupError, StopIteration, ValueError, IndexError):
        return ""  # it ended meanwhile
    except OSError as e:  # e.g. gitmd not root and the process another user's: unproven, refused
        return f"names pid {pid}, whose memory map cannot be read ({e.strerror})"
    if start_ticks(pid) != ticks:
        return ""  # the pid was reused while we read: that one ended
    real, effective = (int(x) for x in uid_line.split()[1:3])
    if uid not in (real, effective):
        return f"names pid {pid}, which runs as uid {real}, not the job's uid {uid}"
    if not maps.strip() and ppid not in (0, 2):
        # a user process has always mapped something until it exits: this one (the job's user's)
        # has let go of its memory (exiting, or a zombie); kernel threads (parent 0 or kthreadd)
        # map nothing and run on
        return ""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x} {ino} "
    if not any(want in line for line in maps.splitlines()):
        return f"names pid {pid}, which does not map this ring file"
    return ""


class ProcessWatcher:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._watched: dict[int, tuple[int, Callable[[int], None]]] = {}  # fd -> (pid, on_exit)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pidfd-watch", daemon=True)
        self._thread.start()

    def watch(self, pid: int, ticks: int, on_exit: Callable[[int], None]) -> bool:
        """Call on_exit(pid) once the process ends. False when it is already gone (or is not the
        process that had this start time): the caller treats it as ended."""
        try:
            fd = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            return False
        if start_ticks(pid) != ticks:
            os.close(fd)
            return False
        with self._lock:
            self._watched[fd] = (pid, on_exit)
            self._epoll.register(fd, select.EPOLLIN)
        return True

    def watching(self) -> int:
        with self._lock:
            return len(self._watched)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                events = self._epoll.poll(0.5)
            except (OSError, ValueError):
                return
            for fd, _ in events:
                with self._lock:
                    entry = self._watched.pop(fd, None)
                    if entry is None:
                        continue
                    self._epoll.unregister(fd)
                os.close(fd)
                pid, on_exit = entry
                try:
                    on_exit(pid)
                except Exception:
                    log.exception("process exit handler for pid %d failed", pid)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        with self._lock:
            for fd in self._watched:
                os.close(fd)
            self._watched.clear()
            self._epoll.close()
