"""Levers against real processes (affinity, priority, environment) and the simulated GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gitmd.analysis.causes import LEVERS
from gitmd.config import SimConfig
from gitmd.levers import registry
from gitmd.levers.base import Kind, LeverError, Risk, Target
from gitmd.levers.host import CpuAffinity, SchedPriority, parse_cpus, threads
from gitmd.levers.launch_env import AllocExpandableSegments, AllocGcThreshold, Tf32Override
from gitmd.telemetry.sim import SimBackend

THREADED = """
import threading, time, sys
evt = threading.Event()
for _ in range(3):
    threading.Thread(target=evt.wait, daemon=True).start()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def job() -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen([sys.executable, "-c", THREADED, "60"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    p.kill()
    p.wait()


def test_every_lever_a_cause_selects_is_in_the_catalog() -> None:
    named = {lever for levers in LEVERS.values() for lever in levers}
    assert named <= set(registry.CATALOG)
    for name, cls in registry.CATALOG.items():
        assert cls.name == name and isinstance(cls.kind, Kind) and isinstance(cls.risk, Risk)


def test_cpu_affinity_on_every_thread_and_back(job: subprocess.Popen[str]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    target = Target(pids=(job.pid,))
    tids = threads(job.pid)
    assert len(tids) == 4
    os.sched_setaffinity(tids[1], {cpus[1]})  # the job placed one thread itself
    before = {t: os.sched_getaffinity(t) for t in tids}
    lever = CpuAffinity(cpus=[cpus[0]])
    saved = lever.capture(target)
    lever.apply(target)
    lever.verify(target)
    assert all(os.sched_getaffinity(t) == {cpus[0]} for t in tids)
    lever.revert(target, saved)
    assert {t: os.sched_getaffinity(t) for t in tids} == before  # captured state, not a default
    with pytest.raises(LeverError):
        lever.verify(target)


def test_priority_and_back(job: subprocess.Popen[str]) -> None:
    target = Target(pids=(job.pid,))
    before = {t: os.getpriority(os.PRIO_PROCESS, t) for t in threads(job.pid)}
    lever = SchedPriority(nice=5 if os.geteuid() != 0 else -3)
    saved = lever.capture(target)
    lever.apply(target)
    lever.verify(target)
    lever.revert(target, saved)
    assert {t: os.getpriority(os.PRIO_PROCESS, t) for t in threads(job.pid)} == before


def test_a_process_gone_is_no_target() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(LeverError, match="no live thread"):
        CpuAffinity(cpus=[0]).capture(Target(pids=(p.pid,)))


def test_launch_levers_change_the_plan_and_are_seen_in_the_process() -> None:
    target = Target(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    lever = AllocExpandableSegments()
    saved = lever.capture(target)
    lever.apply(target)
    assert target.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert lever.conflicts_with(AllocGcThreshold()) and not lever.conflicts_with(Tf32Override())
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, **target.env}
    )
    try:
        time.sleep(0.2)
        lever.verify(Target(pids=(p.pid,), env=target.env))
        with pytest.raises(LeverError, match="runs with"):
            Tf32Override().verify(Target(pids=(p.pid,), env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}))
    finally:
        p.kill()
        p.wait()
    lever.revert(target, saved)
    assert target.env == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert Tf32Override.risk is Risk.NUMERICS and Tf32Override().applies_to(["fp32_gemm"])
    bench = registry.make("cudnn_benchmark")
    assert bench.risk is Risk.NUMERICS and bench.applies_to(["conv_fp32"])
    assert not bench.applies_to(["fp32_gemm"])


def test_device_levers_on_the_simulated_backend() -> None:
    b = SimBackend(SimConfig(gpus=2))
    b.open()
    target = Target(gpus=(1,), backend=b)
    lever = registry.make("power_limit", watts=500)
    saved = lever.capture(target)
    lever.apply(target)
    lever.verify(target)
    assert b.power_limit_mw(1) == 500_000 and b.power_limit_mw(0) == 700_000
    lever.revert(target, saved)
    assert b.power_limit_mw(1) == 700_000
    clocks = registry.make("clocks", mhz=1500)
    saved = clocks.capture(target)
    clocks.apply(target)
    assert b.locked_sm_clock_mhz(1) == 1500
    clocks.revert(target, saved)
    assert b.locked_sm_clock_mhz(1) is None
    with pytest.raises(LeverError):
        registry.make("power_limit", watts=5).apply(target)  # outside the card's range
    assert registry.for_causes(["throttling"]) == []  # device levers only when allowed
    assert {c.name for c in registry.for_causes(["throttling"], allow_device=True)} == {
        "power_limit",
        "clocks",
    }


def test_cpu_lists() -> None:
    assert parse_cpus("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    with pytest.raises(ValueError):
        parse_cpus("a-b")


def test_quiet_cpus_come_from_proc_stat() -> None:
    from gitmd.levers.host import cpu_busy, quiet_cpus

    busy = cpu_busy(0.05)
    assert set(busy) >= os.sched_getaffinity(0) and all(0.0 <= b <= 1.0 for b in busy.values())
    chosen = quiet_cpus(1, interval_s=0.05)
    assert len(chosen) == 1 and chosen <= os.sched_getaffinity(0)


def test_cpu_load_judges_cpus_on_seconds_of_load() -> None:
    """A CPU busy in bursts (40% over the last seconds) is not the quiet one, whatever a short
    glance would have caught; before a second of samples the choice falls back to sampling now.
    Samples older than the span are dropped."""
    from gitmd.levers.host import CpuLoad, quiet_cpus

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    bursty, idle = allowed[0], allowed[1]
    t = {"now": 0}

    def read() -> dict[int, tuple[int, int]]:
        ms = t["now"] * 1_000_000_000
        return {c: (int(0.4 * ms) if c == bursty else 0, ms) for c in allowed}

    load = CpuLoad(span_s=10.0, read=read)
    load.sample(now=0.0)
    assert load.busy() is None  # one sample: nothing to say yet
    for s in range(1, 31):
        t["now"] = s
        load.sample(now=float(s))
    busy = load.busy()
    assert busy is not None and busy[bursty] == pytest.approx(0.4) and busy[idle] == 0.0
    assert len(load._samples) <= 12  # the last 10 s (and one before), not all 31
    assert quiet_cpus(1, load=load) == {idle}  # the lowest-numbered idle one
    assert bursty not in quiet_cpus(len(allowed) - 1, load=load)


def test_pin_host_buffer_refuses_bad_settings_and_says_what_it_pins() -> None:
    from gitmd.levers.base import LeverError, Target

    target = Target(rings={})
    for setting in ({"pid": 1}, {"pid": 1, "buffers": []}, {"pid": 1, "buffers": [[0, 4096]]},
                    {"pid": 1, "buffers": [["x", 1]]}, {"pid": 1, "buffers": [[4096, -1]]}):  # fmt: skip
        with pytest.raises(LeverError, match="pin_host_buffer"):
            registry.make("pin_host_buffer", **setting).apply(target)
    lever = registry.make("pin_host_buffer", pid=7, buffers=[[0x7F0000001000, 64 << 20]])
    with pytest.raises(LeverError, match="no shim ring for pid 7"):
        lever.apply(target)  # not captured: nothing to talk to
    assert lever.describe() == "pin_host_buffer(pid=7, 0x7f0000001000+64MiB)"
    assert lever.kind is Kind.LIVE_SHIM and lever.risk is Risk.MEMORY and lever.causes == {"pageable_copy"}


WORKERS = """
import threading, time
def spin():  # a pool thread: it worked, and now waits for more
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        pass
    time.sleep(30)
def wait():
    time.sleep(30)
for f in (spin, spin, spin, wait, wait):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
time.sleep(30)
"""


def test_active_threads_counts_the_threads_that_work_not_those_that_wait() -> None:
    """cpu_affinity's trial gives a job no fewer CPUs than its working threads (a 16-thread BLAS
    pool confined to 8 CPUs made numpy's part of a CuPy program 10x slower on the H200): three
    spinning threads count, the waiting ones and the sleeping main thread do not."""
    from gitmd.levers.host import active_threads

    p = subprocess.Popen([sys.executable, "-c", WORKERS], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the spinners have run (sharing the GIL) and stopped; the rest wait
        assert active_threads([p.pid]) == 3
        assert active_threads([p.pid, 2**22 + 7]) == 3  # a pid that is gone counts nothing
    finally:
        p.kill()
        p.wait()


def test_a_cpu_affinity_trial_never_gives_fewer_cpus_than_working_threads() -> None:
    from gitmd.levers.host import affinity_size

    assert affinity_size(16, 1, 16) == 8 and affinity_size(16, 0, 16) == 8  # as before: 2..8
    assert affinity_size(4, 1, 16) == 4 and affinity_size(1, 0, 16) == 2  # one squeezed core: 2
    assert affinity_size(16, 12, 16) == 12  # a 12-thread pool keeps 12 CPUs
    assert affinity_size(16, 40, 16) == 16  # never more than the host has: then it only moves it
    assert affinity_size(1, 0, 1) == 1
