"""The window context sampler against this very process (real /proc) and the simulated backend."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from gitmd.capture.context import ContextSampler, cpu_times, host_cpu_ns, own_cpu_s, tree_cpu_s
from gitmd.config import SimConfig, SimProcess, ThrottleEpisode
from gitmd.telemetry.backend import REASON_BITS
from gitmd.telemetry.sim import SimBackend


def sim(**kw: object) -> SimBackend:
    b = SimBackend(SimConfig(**kw))  # type: ignore[arg-type]
    b.open()
    return b


def test_samples_a_busy_process_and_its_gpu() -> None:
    job = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        b = sim(
            gpus=2,
            processes=(SimProcess(gpu=1, pid=job.pid), SimProcess(gpu=1, pid=424242, sm_util_pct=70.0)),
        )
        time.sleep(0.1)
        s = ContextSampler(b, 0.01)
        s.start([job.pid])
        time.sleep(0.3)
        c = s.stop()
    finally:
        job.kill()
        job.wait()
    assert c.gpus == (1,) and c.main_tid == job.pid
    assert set(c.cores) == os.sched_getaffinity(os.getpid())
    h = c.host
    assert len(h) >= 5 and (np.diff(h["t_ns"]) > 0).all()
    for k in ("job_run_ns", "job_wait_ns", "main_run_ns", "cores_busy_ns", "cores_total_ns"):
        assert (np.diff(h[k]) >= 0).all(), k  # cumulative counters never go back
    # a spinning thread runs (or waits for a CPU) the whole time
    assert h["main_run_ns"][-1] + h["main_wait_ns"][-1] - h["main_run_ns"][0] - h["main_wait_ns"][0] > 0.2e9
    g = c.gpu
    assert len(g) == len(h) and (g["gpu"] == 1).all()
    assert (g["others"] == 1).all() and (g["others_sm_pct"] == 70.0).all()  # the co-tenant
    assert (g["sm_clock_max_mhz"] > 0).all()


def test_gpu_rows_follow_a_throttling_episode() -> None:
    now = {"ns": 10**18}
    b = SimBackend(
        SimConfig(
            gpus=1,
            processes=(SimProcess(gpu=0, pid=1),),  # busy: at full clock outside the episode
            throttle_episodes=(ThrottleEpisode(0, 1.0, 1.0, reason="hw_slowdown"),),
        ),
        monotonic_s=lambda: (now["ns"] - 10**18) / 1e9,
        clock_ns=lambda: now["ns"],
    )
    b.open()
    s = ContextSampler(b)
    s.prepare([1], gpus=(0,), now_ns=now["ns"])
    rows = []
    for t in (0.5, 1.5, 2.5):
        now["ns"] = 10**18 + int(t * 1e9)
        rows.append(s.gpu_row(now["ns"], 0))
    reasons = [int(r[7]) for r in rows]
    assert reasons[1] & REASON_BITS["hw_slowdown"] and not reasons[0] & REASON_BITS["hw_slowdown"]
    assert rows[1][2] < rows[0][2]  # SM clock lower in the episode


def test_a_job_that_is_gone_costs_nothing_but_its_values() -> None:
    s = ContextSampler(None, 0.01)
    s.start([2**22 + 12345])  # no such process
    time.sleep(0.05)
    c = s.stop()
    assert len(c.host) >= 2 and (c.host["job_threads"] == 0).all() and len(c.gpu) == 0


def test_cpu_times_reads_proc_stat() -> None:
    busy, total = cpu_times(__import__("pathlib").Path("/proc"), (0,))
    assert 0 < busy <= total


def test_own_cpu_counts_a_live_child_and_keeps_it_once_reaped(tmp_path: __import__("pathlib").Path) -> None:
    """gitmd's CPU seconds hold its analysis worker (a live child, read from /proc) and go on holding
    it once the child is reaped (os.times' children): the sum never drops."""
    before = own_cpu_s()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(30)",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        live = before
        while time.monotonic() < deadline:  # the child's 0.6 s of CPU shows while it is alive
            live = own_cpu_s()
            if live - before >= 0.5:
                break
            time.sleep(0.05)
        assert live - before >= 0.5
    finally:
        child.kill()
        child.wait()
    assert own_cpu_s() >= live - 0.02  # reaped: moved to os.times' children, not lost (one tick)
    # a /proc without the process's tasks: its own and reaped children's seconds only
    assert 0 < own_cpu_s(tmp_path) <= own_cpu_s()


def test_host_cpu_sums_every_cpu_and_is_none_without_proc_stat(tmp_path: __import__("pathlib").Path) -> None:
    got = host_cpu_ns()
    assert got is not None and 0 < got[0] <= got[1]
    assert host_cpu_ns(tmp_path) is None
    (tmp_path / "stat").write_text("cpu  1 0 1 8 0 0 0 0\ncpu0 1 0 1 8 0 0 0 0\ncpu1 3 0 0 7 0 0 0 0\n")
    busy, total = host_cpu_ns(tmp_path)  # type: ignore[misc]
    assert busy * 4 == total  # (2 + 3) busy ticks of (10 + 10): the per-CPU lines, not the sum line


def test_tree_cpu_reads_another_process_with_its_live_child_and_none_once_it_is_gone() -> None:
    """How the benchmarks read gitmd's CPU from outside: the process and its live children."""
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\ntime.sleep(30)"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {spin!r}])"]
    )
    try:
        deadline, got = time.monotonic() + 20, 0.0
        while time.monotonic() < deadline and got < 0.45:  # the child's spin shows in its parent's tree
            got = tree_cpu_s(parent.pid) or 0.0
            time.sleep(0.05)
        assert got >= 0.45
    finally:
        for c in __import__("pathlib").Path(f"/proc/{parent.pid}/task").glob("*/children"):
            for pid in c.read_text().split():
                os.kill(int(pid), 9)
        try:
            parent.wait(20)
        except subprocess.TimeoutExpired:
            parent.kill()
            parent.wait()
    assert tree_cpu_s(parent.pid) is None
