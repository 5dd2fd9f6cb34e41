"""Live host levers: CPU placement and scheduling priority of every thread of the job's processes.

Capture and revert are per thread (a job may have placed its own threads); threads that appear
after ``apply`` inherit the applied setting from their creator and are set back to their process's
captured main-thread setting by ``revert``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gitmd.capture.context import per_cpu_times
from gitmd.levers.base import Kind, Lever, LeverError, Target


def threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def _each_thread(pids: Iterable[int]) -> list[tuple[int, int]]:
    return [(pid, tid) for pid in pids for tid in threads(pid)]


ACTIVE_SHARE = 0.05  # a thread that has run this share of its life (and ACTIVE_S) works, not waits
ACTIVE_S = 0.05


def active_threads(pids: Iterable[int], proc: Path = Path("/proc")) -> int:
    """How many threads of these processes have been doing work: CPU time (user + system) of at
    least ACTIVE_S and ACTIVE_SHARE of the thread's life so far, from /proc/<pid>/task/<tid>/stat.
    A pool of worker threads (a BLAS library's, XLA's) counts whole; threads that only wait do not."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    n = 0
    for pid in pids:
        try:
            tids = os.listdir(proc / str(pid) / "task")
        except OSError:
            continue
        for tid in tids:
            try:
                fields = (proc / str(pid) / "task" / tid / "stat").read_text().rsplit(")", 1)[1].split()
                cpu_s = (int(fields[11]) + int(fields[12])) / tick
                age_s = uptime - int(fields[19]) / tick
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            if cpu_s >= ACTIVE_S and cpu_s >= ACTIVE_SHARE * max(age_s, 1e-3):
                n += 1
    return n


def affinity_size(current: int, active: int, available: int, most: int = 8) -> int:
    """How many CPUs a cpu_affinity trial gives a job that runs on ``current`` CPUs and has
    ``active`` working threads, of the ``available`` gitmd may use: 2 to ``most`` (by ``current``),
    but never fewer than its working threads. Confined below its threads, a job's work queues behind
    itself: a CPU-placement arm of 8 CPUs made the numpy part of a CuPy program (a 16-thread BLAS
    pool) 10x slower, 0.4 s to 4.7 s (H200, 2026-12-04)."""
    return max(1, min(available, max(2, min(current, most), active)))


def parse_cpus(text: str) -> set[int]:
    """ "0-3,8,10-11" -> {0,1,2,3,8,10,11}"""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r}")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def gpu_local_cpus(pci_bus_id: str) -> set[int]:
    """The CPUs of the GPU's NUMA node, from sysfs (empty when unknown)."""
    bus = pci_bus_id.lower()
    if bus.count(":") == 2 and len(bus.split(":")[0]) == 8:
        bus = bus[4:]  # NVML's 00000000:19:00.0 -> 0000:19:00.0
    try:
        return parse_cpus(open(f"/sys/bus/pci/devices/{bus}/local_cpulist").read())
    except (OSError, ValueError):
        return set()


def _shares(a: Mapping[int, tuple[int, int]], b: Mapping[int, tuple[int, int]]) -> dict[int, float]:
    busy = {}
    for cpu, (used, total) in b.items():
        u0, t0 = a.get(cpu, (used, total))
        busy[cpu] = (used - u0) / (total - t0) if total > t0 else 0.0
    return busy


def cpu_busy(interval_s: float = 0.2) -> dict[int, float]:
    """Each CPU's busy share over ``interval_s``, from /proc/stat."""
    a = per_cpu_times()
    time.sleep(interval_s)
    return _shares(a, per_cpu_times())


class CpuLoad:
    """Each CPU's busy share over the last ``span_s`` seconds, from /proc/stat read at every
    ``sample()`` (a daemon job, once a second): CPUs for a job are judged on seconds of load, not on
    a 0.1-s glance that an intermittent neighbour can slip through, and choosing them needs no
    sleep (a registration carrying a cpu_affinity policy waited 0.1 s for one)."""

    def __init__(self, span_s: float = 10.0, read: Any = per_cpu_times) -> None:
        self.span_s = span_s
        self._read = read
        self._samples: deque[tuple[float, dict[int, tuple[int, int]]]] = deque()
        self._lock = threading.Lock()

    def sample(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        times = self._read()
        with self._lock:
            self._samples.append((now, times))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.span_s:
                self._samples.popleft()

    def busy(self, min_span_s: float = 1.0) -> dict[int, float] | None:
        """The shares over the samples kept (at least ``min_span_s`` apart), None before that."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            (t0, a), (t1, b) = self._samples[0], self._samples[-1]
        return _shares(a, b) if t1 - t0 >= min_span_s else None


def quiet_cpus(
    count: int, prefer: set[int] | None = None, interval_s: float = 0.2, load: CpuLoad | None = None
) -> set[int]:
    """The ``count`` least busy CPUs gitmd may use, those in ``prefer`` (near the GPU) first; busy
    as ``load`` has seen it over its span, else sampled now for ``interval_s``."""
    allowed = os.sched_getaffinity(0)
    busy = (load.busy() if load is not None else None) or cpu_busy(interval_s)
    near = prefer or set()
    # Idle before near: a core near the GPU that other work keeps busy is what the job should leave.
    ranked = sorted(
        (c for c in allowed if c in busy), key=lambda c: (busy[c] > 0.5, c not in near, round(busy[c], 1), c)
    )
    return set(ranked[:count])


class _PerThread(Lever):
    """A setting every thread of the job's processes has: captured, set and restored per thread."""

    kind = Kind.LIVE_HOST
    what: str = "setting"

    def _get(self, tid: int) -> Any:
        raise NotImplementedError

    def _set(self, tid: int, value: Any) -> None:
        raise NotImplementedError

    def wanted(self) -> Any:
        raise NotImplementedError

    def capture(self, target: Target) -> dict[str, Any]:
        saved: dict[str, Any] = {"threads": {}, "main": {}}
        for pid, tid in _each_thread(target.pids):
            try:
                saved["threads"][str(tid)] = self._get(tid)
            except OSError:
                continue  # ended meanwhile
            if tid == pid:
                saved["main"][str(pid)] = saved["threads"][str(tid)]
        if not saved["threads"]:
            raise LeverError(f"no live thread in {list(target.pids)}")
        return saved

    def apply(self, target: Target) -> None:
        want = self.wanted()
        for _, tid in _each_thread(target.pids):
            try:
                self._set(tid, want)
            except ProcessLookupError:
                continue
            except OSError as e:
                raise LeverError(f"cannot set thread {tid}'s {self.what} to {want}: {e.strerror}") from None

    def verify(self, target: Target) -> None:
        want = self.wanted()
        for _, tid in _each_thread(target.pids):
            try:
                got = self._get(tid)
            except OSError:
                continue
            if got != want:
                raise LeverError(f"thread {tid} has {self.what} {got}, not {want}")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        before, main = saved.get("threads", {}), saved.get("main", {})
        for pid, tid in _each_thread(target.pids):
            # A thread born after capture inherited the applied value: its process's main thread's.
            value = before.get(str(tid), main.get(str(pid)))
            if value is None:
                continue
            try:
                self._set(tid, value)
            except ProcessLookupError:
                continue
            except OSError as e:
                raise LeverError(f"cannot restore thread {tid}'s {self.what} {value}: {e.strerror}") from None


class CpuAffinity(_PerThread):
    """Pin the job's threads to ``cpus`` (near its GPU, away from contended cores)."""

    name = "cpu_affinity"
    host_only = True
    causes = frozenset({"host_contention", "launch_bound", "sync_stall"})
    what = "CPUs"

    def wanted(self) -> list[int]:
        cpus = sorted(set(self.setting.get("cpus", ())))
        if not cpus:
            raise LeverError("cpu_affinity needs a non-empty set of CPUs")
        return cpus

    def _get(self, tid: int) -> list[int]:
        return sorted(os.sched_getaffinity(tid))

    def _set(self, tid: int, value: Any) -> None:
        os.sched_setaffinity(tid, set(value))


class SchedPriority(_PerThread):
    """Nice value of the job's threads (negative: ahead of other work on its cores; needs root)."""

    name = "sched_priority"
    host_only = True
    causes = frozenset({"host_contention", "launch_bound", "sync_stall"})
    what = "nice value"
    defaults = {"nice": -5}

    def wanted(self) -> int:
        n = int(self.setting_or_default("nice"))
        if not -20 <= n <= 19:
            raise LeverError("nice must be -20..19")
        return n

    def _get(self, tid: int) -> int:
        return os.getpriority(os.PRIO_PROCESS, tid)

    def _set(self, tid: int, value: Any) -> None:
        os.setpriority(os.PRIO_PROCESS, tid, int(value))
