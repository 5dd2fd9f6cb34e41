"""A live experiment on a real process: a CPU job that shares its core with a hog. Moving it to the
other core (cpu_affinity) is measurably faster and is promoted; with no hog there is nothing to gain
and the job is left as it was. The step time is what the job itself reports (no GPU here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmd.experiments.interventions import Interventions
from gitmd.experiments.live import ExperimentStore, LiveExperiment, Measurement
from gitmd.levers.base import Target
from gitmd.levers.host import CpuAffinity
from gitmd.store.audit import Audit
from gitmd.store.db import Store

JOB = """
import sys, time
out = open(sys.argv[1], "a", buffering=1)
while True:
    t = time.perf_counter()
    x = 0
    for i in range(20000):
        x += i * i
    out.write(f"{(time.perf_counter() - t) * 1e3:.4f}\\n")
"""
HOG = "while True: pass"

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def spawn(code: str, cpu: int, *args: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", code, *args])
    os.sched_setaffinity(p.pid, {cpu})
    return p


@pytest.fixture
def cpus() -> tuple[int, int]:
    c = sorted(os.sched_getaffinity(0))
    return c[0], c[1]


@pytest.fixture
def steps(tmp_path: Path) -> Path:
    return tmp_path / "steps.txt"


def measurer(path: Path) -> Iterator[Measurement | None]:
    n = 0
    while True:
        start = path.stat().st_size if path.exists() else 0
        time.sleep(0.6)
        with open(path) as f:
            f.seek(start)
            lines = [float(x) for x in f.read().split()[1:]]  # the first may be a partial line
        n += 1
        # time per step over the window, as the daemon measures it: a thread that loses its core for
        # whole time slices runs its steps at full speed when it runs, so a median would hide that
        yield Measurement(window_id=n, step_ms=600.0 / len(lines) if lines else None)


def run(tmp_path: Path, cpus: tuple[int, int], steps: Path, hog: bool) -> tuple[bool, dict, set[int]]:
    job = spawn(JOB, cpus[0], str(steps))
    hogs = [spawn(HOG, cpus[0]) for _ in range(2)] if hog else []
    try:
        time.sleep(0.5)
        store = Store(tmp_path / "s.db")
        ivs = Interventions(store)
        m = measurer(steps)
        exp = LiveExperiment(
            ExperimentStore(store),
            ivs,
            "job1",
            CpuAffinity(cpus=[cpus[1]]),
            "host_contention",
            target=lambda: Target(pids=(job.pid,)),
            measure=lambda: next(m),
            rounds=4,
            settle_s=0.2,
        )
        d = exp.run()
        record = ExperimentStore(store).get(exp.exp.id)
        assert [iv.state for iv in ivs.list("job1", pending_only=True)] == []
        assert len(Audit(store).list(limit=1000)) >= 2 * 4  # every apply and revert audited
        return d.promote, record.decision, os.sched_getaffinity(job.pid)
    finally:
        for p in (job, *hogs):
            p.kill()
            p.wait()


def test_contended_job_moved_away_is_promoted(tmp_path: Path, cpus: tuple[int, int], steps: Path) -> None:
    promoted, decision, affinity = run(tmp_path, cpus, steps, hog=True)
    assert promoted, decision
    assert decision["low"] >= 1.03 and decision["pairs"] >= 3
    assert affinity == {cpus[1]}  # the promoted placement stays


def test_nothing_to_gain_leaves_the_job_as_it_was(tmp_path: Path, cpus: tuple[int, int], steps: Path) -> None:
    promoted, decision, affinity = run(tmp_path, cpus, steps, hog=False)
    assert not promoted, decision
    assert affinity == {cpus[0]}  # back to where the job was, not to a default
