"""What else happened while a window was open: the host and GPU series that attribution tests
against the job's own timeline.

While a window is open a thread samples, every ``interval_s`` (25 ms by default):
- the host: the job's threads' scheduler statistics (``/proc/PID/task/TID/schedstat``: time on a
  CPU and time runnable but waiting for one), separately for the job's busiest thread (the one that
  issues its GPU work, in practice), and how busy the job's allowed cores were (``/proc/stat``), so
  other processes' load on those cores is the cores' busy time minus the job's own;
- each GPU the job runs on: SM clock against its maximum, power, temperature, clock event reasons,
  utilization, and the other processes on that GPU with their SM utilization (NVML's per-process
  samples), the co-tenants.

Every read is isolated: a thread that ends, a field a board does not answer, a process that exits
mid-window cost that value only (NaN or a carried-forward counter), never the window.

What a window yields (WindowContext, rows of HOST_DTYPE and GPU_DTYPE) is plain data in
gitmd.records, which analysis reads; this module samples it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gitmd.records import GPU_DTYPE, HOST_DTYPE, WindowContext, encode_reasons
from gitmd.telemetry.backend import TelemetryBackend

log = logging.getLogger(__name__)

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_NS_PER_TICK = 1_000_000_000 // _CLK_TCK


def _read_schedstat(path: str) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as f:
            parts = f.read(128).split()
        return int(parts[0]), int(parts[1])
    except (OSError, ValueError, IndexError):
        return None


def per_cpu_times(proc: Path = Path("/proc")) -> dict[int, tuple[int, int]]:
    """Each CPU's (busy, total) ns since boot, from /proc/stat's per-CPU lines."""
    out: dict[int, tuple[int, int]] = {}
    try:
        lines = (proc / "stat").read_bytes().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if not parts or not parts[0].startswith(b"cpu") or not parts[0][3:].isdigit():
            continue
        try:
            v = [int(x) for x in parts[1:9]]
        except ValueError:
            continue
        v += [0] * (8 - len(v))
        user, nice, system, idle, iowait, irq, softirq, steal = v
        b = user + nice + system + irq + softirq + steal
        out[int(parts[0][3:])] = (b * _NS_PER_TICK, (b + idle + iowait) * _NS_PER_TICK)
    return out


def cpu_times(proc: Path, cores: tuple[int, ...]) -> tuple[int, int]:
    """(busy, total) ns summed over ``cores``."""
    times = per_cpu_times(proc)
    picked = [times[c] for c in cores if c in times]
    return sum(b for b, _ in picked), sum(t for _, t in picked)


def host_cpu_ns(proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(busy, total) ns summed over every CPU of the host; None where /proc/stat cannot be read."""
    times = per_cpu_times(proc)
    if not times:
        return None
    return sum(b for b, _ in times.values()), sum(t for _, t in times.values())


def _stat_parts(path: Path) -> tuple[float, float] | None:
    """A process's own user and system CPU seconds, and its reaped children's (``stat`` fields 14-15
    and 16-17, after the command name, which may hold spaces and parentheses); None where it is gone."""
    try:
        f = [int(x) for x in path.read_bytes().rsplit(b")", 1)[1].split()[11:15]]
    except (OSError, IndexError, ValueError):
        return None
    if len(f) < 4:
        return None
    return (f[0] + f[1]) / _CLK_TCK, (f[2] + f[3]) / _CLK_TCK


def _stat_cpu_s(path: Path) -> float:
    """A process's CPU seconds with its reaped children's; 0 where it is gone."""
    parts = _stat_parts(path)
    return sum(parts) if parts else 0.0


def _children(proc: Path, pid: int | str) -> set[int]:
    """The live child processes of ``pid`` (every thread's ``children``); empty where /proc says none."""
    out: set[int] = set()
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.update(int(x) for x in (task / "children").read_bytes().split())
        except (OSError, ValueError):
            continue
    return out


def own_cpu_s(proc: Path = Path("/proc")) -> float:
    """CPU seconds this process has used: every thread of it, its reaped children (os.times) and its
    live children (the daemon's analysis worker, multiprocessing's resource tracker: /proc/PID/stat).
    A child reaped between the reads would be in neither part: the reaped part is read again after
    the live one and the whole read repeated when it moved, so the sum never drops."""
    total = 0.0
    for _ in range(5):
        a = os.times()
        live = sum(_stat_cpu_s(proc / str(pid) / "stat") for pid in _children(proc, "self"))
        b = os.times()
        total = b.user + b.system + b.children_user + b.children_system + live
        if (a.children_user, a.children_system) == (b.children_user, b.children_system):
            break
    return total


def tree_cpu_s(pid: int, proc: Path = Path("/proc")) -> float | None:
    """Another process's CPU seconds as own_cpu_s counts its own (the benchmarks read gitmd's this
    way, from outside): its threads, its reaped children, its live children (read again when one
    was reaped meanwhile); None once it is gone."""
    stat = proc / str(pid) / "stat"
    total = None
    for _ in range(5):
        before = _stat_parts(stat)
        live = sum(_stat_cpu_s(proc / str(c) / "stat") for c in _children(proc, pid))
        after = _stat_parts(stat)
        if before is None or after is None:
            return None
        total = sum(after) + live
        if before[1] == after[1]:
            break
    return total


@dataclass
class ContextSampler:
    """One window's sampler: ``start(pids)`` when the window opens, ``stop()`` when it closes."""

    backend: TelemetryBackend | None
    interval_s: float = 0.025
    proc: Path = Path("/proc")
    _pids: list[int] = field(default_factory=list)
    _host: list[tuple[int, ...]] = field(default_factory=list)
    _gpu: list[tuple[float, ...]] = field(default_factory=list)
    _notes: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _cores: tuple[int, ...] = ()
    _gpus: tuple[int, ...] = ()
    _main: str = ""
    _last: dict[str, tuple[int, int]] = field(default_factory=dict)  # per task path: last (run, wait)
    _util_since_us: dict[int, int] = field(default_factory=dict)
    _others_util: dict[int, dict[int, float]] = field(default_factory=dict)

    def prepare(
        self, pids: list[int], gpus: tuple[int, ...] | None = None, now_ns: int | None = None
    ) -> None:
        """Before the first sample: the job's pids, and its GPUs (found through the backend when
        not given)."""
        self._pids = list(pids)
        self._cores = self._allowed_cores()
        self._gpus = self._job_gpus() if gpus is None else gpus
        now_us = (time.time_ns() if now_ns is None else now_ns) // 1000
        self._util_since_us = {g: now_us - 1_000_000 for g in self._gpus}
        self._others_util = {g: {} for g in self._gpus}

    def start(self, pids: list[int]) -> None:
        self.prepare(pids)
        self._main = self._busiest_task()
        self._tick()
        self._thread = threading.Thread(target=self._run, name="gitmd-window-context", daemon=True)
        self._thread.start()

    def stop(self) -> WindowContext:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._tick()
        main_tid = int(self._main.rsplit("/", 2)[-2]) if self._main else 0
        return WindowContext(
            self.interval_s,
            self._cores,
            self._gpus,
            main_tid,
            np.array(self._host, dtype=HOST_DTYPE),
            np.array(self._gpu, dtype=GPU_DTYPE),
            tuple(self._notes),
        )

    # -- setup ---------------------------------------------------------------------------------
    def _allowed_cores(self) -> tuple[int, ...]:
        cores: set[int] = set()
        for pid in self._pids:
            try:
                cores |= os.sched_getaffinity(pid)
            except OSError:
                continue
        return tuple(sorted(cores)) or tuple(range(os.cpu_count() or 1))

    def _job_gpus(self) -> tuple[int, ...]:
        if self.backend is None:
            return ()
        every = tuple(g.index for g in self.backend.gpus())
        seen = []
        pids = set(self._pids)
        for g in every:
            try:
                s = self.backend.fast_sample(g)
            except Exception as e:
                self._notes.append(f"GPU {g}: {e}")
                continue
            if any(p.pid in pids for p in s.processes):
                seen.append(g)
        if not seen:
            self._notes.append("the job's processes were not in any GPU's process list; sampling every GPU")
        return tuple(seen) or every

    def _tasks(self) -> list[str]:
        out = []
        for pid in self._pids:
            base = f"{self.proc}/{pid}/task"
            try:
                out += [f"{base}/{tid}/schedstat" for tid in os.listdir(base)]
            except OSError:
                continue
        return out

    def _busiest_task(self) -> str:
        best, best_run = "", -1
        for path in self._tasks():
            v = _read_schedstat(path)
            if v is not None and v[0] > best_run:
                best, best_run = path, v[0]
        return best

    # -- sampling ------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._tick()
            except Exception as e:  # never let a sampling bug cost the window
                self._notes.append(f"context sampling stopped: {type(e).__name__}: {e}")
                log.exception("window context sampling failed")
                return

    def _tick(self) -> None:
        now = time.time_ns()
        run = wait = threads = 0
        for path in self._tasks():
            v = _read_schedstat(path)
            if v is None:
                continue
            self._last[path] = v
            threads += 1
        # Threads that ended keep what they had: the counters are cumulative and must not go back.
        for r, w in self._last.values():
            run += r
            wait += w
        main_run, main_wait = self._last.get(self._main, (0, 0))
        busy, total = cpu_times(self.proc, self._cores)
        self._host.append((now, run, wait, main_run, main_wait, threads, busy, total))
        if self.backend is not None:
            for g in self._gpus:
                self._gpu.append(self.gpu_row(now, g))

    def gpu_row(self, now: int, g: int) -> tuple[float, ...]:
        """One GPU_DTYPE row: GPU ``g`` read now, stamped ``now`` (unix ns)."""
        assert self.backend is not None
        nan = float("nan")
        try:
            s = self.backend.fast_sample(g)
        except Exception:
            return (now, g, nan, nan, nan, nan, nan, 0, nan, 0, nan)
        pids = set(self._pids)
        others = {p.pid for p in s.processes} - pids
        latest = self._others_util[g]
        for u in self.backend.process_utilization(g, self._util_since_us[g]):
            self._util_since_us[g] = max(self._util_since_us[g], u.ts_us)
            if u.pid not in pids:
                latest[u.pid] = u.sm_util_pct
        for pid in list(latest):
            if pid not in others:
                del latest[pid]

        def f(v: float | None) -> float:
            return nan if v is None else float(v)

        return (
            now,
            g,
            f(s.sm_clock_mhz),
            f(s.sm_clock_max_mhz),
            f(s.power_mw),
            f(s.power_limit_mw),
            f(s.temperature_c),
            encode_reasons(s.clock_event_reasons),
            f(s.utilization_gpu_pct),
            len(others),
            float(sum(latest.values())) if others else 0.0,
        )
