"""Applying and reverting through the store, against a real process; recovery after a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitmd.experiments.interventions import Interventions
from gitmd.levers.base import LeverError, Target
from gitmd.levers.host import CpuAffinity
from gitmd.store.audit import Audit
from gitmd.store.db import Store


def test_applied_then_recovered_by_the_next_gitmd(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store = Store(tmp_path / "s.db")
        ivs = Interventions(store)
        iv = ivs.apply("job1", CpuAffinity(cpus=[cpus[0]]), Target(pids=(job.pid,)))
        assert iv.state == "applied" and os.sched_getaffinity(job.pid) == {cpus[0]}
        assert iv.saved["main"][str(job.pid)] == cpus
        store.close()  # gitmd dies here without reverting

        again = Interventions(Store(tmp_path / "s.db"))
        assert again.recover() == 1
        assert os.sched_getaffinity(job.pid) == set(cpus)
        assert again.get(iv.id).state == "reverted"
        assert again.recover() == 0
        actions = [e.action for e in Audit(again.store).list()]
        assert actions == ["reverted", "apply"]
    finally:
        job.kill()
        job.wait()


def test_a_reused_pid_is_never_touched(tmp_path: Path) -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    store = Store(tmp_path / "s.db")
    ivs = Interventions(store)
    try:
        iv = ivs.apply("job1", CpuAffinity(cpus=[0]), Target(pids=(job.pid,)))
    finally:
        job.kill()
        job.wait()
    stored = dict(iv.target)
    stored["pids"] = [[os.getpid(), 1]]  # this test's own pid, with a start time that is not its own
    assert ivs.rebuild(stored).pids == ()
    assert ivs.revert(iv.id, "job ended").state == "reverted"


def test_a_failed_apply_is_recorded_and_raised(tmp_path: Path) -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ivs = Interventions(Store(tmp_path / "s.db"))
        with pytest.raises(LeverError):
            ivs.apply("job1", CpuAffinity(cpus=[100_000]), Target(pids=(job.pid,)))
        [iv] = ivs.list("job1")
        assert iv.state == "failed" and os.sched_getaffinity(job.pid) == os.sched_getaffinity(0)
    finally:
        job.kill()
        job.wait()


def test_a_lever_takes_on_every_rank_or_on_none(tmp_path: Path) -> None:
    """A distributed job's ranks are one target: a live lever applies to all of them or, when it does
    not take on one, is reverted on every one, the ranks where it took included (mixed settings
    across ranks are never left in force; issue 29). Here it does not take on rank 1: as a process
    that resets its own affinity would, found by the lever's check."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    env = {**os.environ, "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**env, "RANK": str(r)})
        for r in (0, 1)
    ]

    class NotOnRank1(CpuAffinity):
        def verify(self, target: Target) -> None:
            super().verify(target)
            if ranks[1].pid in target.pids:
                os.sched_setaffinity(ranks[1].pid, cpus)  # its own reset
                raise LeverError(f"pid {ranks[1].pid} has CPUs {cpus}, not {self.wanted()}")

    try:
        ivs = Interventions(Store(tmp_path / "s.db"))
        with pytest.raises(LeverError):
            ivs.apply("job1", NotOnRank1(cpus=[cpus[0]]), Target(pids=tuple(p.pid for p in ranks)))
        assert [os.sched_getaffinity(p.pid) for p in ranks] == [set(cpus), set(cpus)]  # rank 0 reverted
        assert ivs.store.conn.execute("SELECT state FROM interventions").fetchall() == [("failed",)]
        iv = ivs.apply("job1", CpuAffinity(cpus=[cpus[0]]), Target(pids=tuple(p.pid for p in ranks)))
        assert [os.sched_getaffinity(p.pid) for p in ranks] == [{cpus[0]}, {cpus[0]}]  # on both
        ivs.revert(iv.id, "done")
        assert [os.sched_getaffinity(p.pid) for p in ranks] == [set(cpus), set(cpus)]
    finally:
        for p in ranks:
            p.kill()
            p.wait()
