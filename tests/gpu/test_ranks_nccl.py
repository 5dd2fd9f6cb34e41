"""On a host with two GPUs (the device tool's nvidia-h200-x2): a DDP training over NCCL, one rank per
GPU, with a planted slow rank (issue 29). Skipped with fewer than two GPUs: it has not run yet.

    GPU_TESTS_K=nccl tests/gpu/run.sh OUT tests

1. The slow rank's input pipeline (busy CPU work before each step): gitmd names it the straggler,
   why (its GPU waits between launches), and the other rank waits in its collectives.
2. The slow rank pinned to CPUs six busy processes share: a CPU placement, applied to every rank
   together, is kept only if faster; every rank then has the same CPUs, and rank 0's loss is the
   plain run's at the same step count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import gpu_count
from tests.gpu.test_capture import PROGRAMS, start_job, wait_gpus, wait_processes
from tests.gpu.test_experiments import CONFIG, experiments, keep_log, out
from tests.integration.conftest import ROOT, Daemon, ctl, free_port


def two_gpus() -> bool:
    try:
        return gpu_count() >= 2
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not two_gpus(), reason="needs two GPUs (nvidia-h200-x2)")
HOG = ROOT / "bench" / "workloads" / "cpu_hog.py"
PIN = "2,3"


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(PROGRAMS / "ddp_nccl.py"), *args]  # fmt: skip


def ready(job: subprocess.Popen[str]) -> dict[int, int]:
    """pid -> rank, from the ranks' `ready <rank> <pid>` lines."""
    assert job.stdout is not None
    got = {}
    while len(got) < 2:
        line = job.stdout.readline()
        assert line, "the job ended before both ranks were ready"
        if line.startswith("ready "):
            _, rank, pid = line.split()
            got[int(pid)] = int(rank)
    return got


def result(stdout: str) -> tuple[int, str]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("result ")]
    fields = dict(f.split("=") for f in line.split()[1:])
    return int(fields["steps"]), fields["loss"]


@pytest.mark.timeout(300)
def test_the_slow_rank_is_named_and_the_other_waits_in_its_collectives(
    daemon_factory: Any, short_tmp: Path
) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    stop = short_tmp / "stop"
    job = start_job(d, "nccl", torchrun(str(stop), "--host-ms", "4", "--slow-rank", "1"))
    rep: dict[str, Any] | None = None
    try:
        pids = ready(job)
        slow = next(pid for pid, rank in pids.items() if rank == 1)
        view = wait_gpus(d, "nccl", wait_processes(d, "nccl", 2))
        by_pid = {int(p["pid"]): p for p in view["processes"]}
        for pid, rank in pids.items():  # one rank per GPU, each shown with its own
            assert (by_pid[pid].get("rank"), by_pid[pid]["gpus"]) == (rank, [rank]), by_pid[pid]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = ctl(d.socket, "explain", "nccl", "--json", check=False)
            if r.returncode == 0:
                rep = json.loads(r.stdout)
                if rep.get("straggler") and len(rep.get("ranks") or []) == 2:
                    break
            time.sleep(2)
        out("nccl-straggler.json", rep)
        assert rep is not None and len(rep["ranks"]) == 2, rep
        s = rep["straggler"]
        assert int(s["pid"]) == slow and "between launches" in s["why"], s
        assert int(rep["cause_pid"]) == slow  # the job's causes are the straggler's
        # it reaches the all-reduces last; the broadcast opening each step either rank may reach last
        assert int(s["collectives"]) > 0 and int(s["last_arrivals"]) > 0, s
        ranks = {int(x["pid"]): x for x in rep["ranks"]}
        other = next(x for pid, x in ranks.items() if pid != slow)
        assert other["communication_ms"] > ranks[slow]["communication_ms"], ranks  # it waits
    finally:
        stop.touch()
        stdout, stderr = job.communicate(timeout=120)
        keep_log(d, "gitmd-nccl.log")
    assert job.returncode == 0, stderr[-3000:]
    done = sorted(line.split() for line in stdout.splitlines() if line.startswith("done"))
    assert [x[1] for x in done] == ["0", "1"] and done[0][2] == done[1][2], done  # same steps


@pytest.mark.timeout(420)
def test_a_cpu_placement_is_kept_on_every_rank_only_if_faster_and_the_loss_holds(
    daemon_factory: Any, short_tmp: Path
) -> None:
    if len(os.sched_getaffinity(0)) < 8:
        pytest.skip("needs 8 CPUs")
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    stop = short_tmp / "stop"
    hog = subprocess.Popen(
        ["taskset", "-c", PIN, sys.executable, str(HOG), "--procs", "6", "--seconds", "400"]
    )
    job = start_job(d, "nccl-pinned", torchrun(str(stop), "--pin-slow", PIN, "--slow-rank", "1"))
    final = None
    try:
        pids = ready(job)
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline and final is None:
            final = next(
                (e for e in experiments(d, "nccl-pinned")
                 if e.state in ("promoted", "reverted", "failed", "abandoned")),
                None,
            )  # fmt: skip
            time.sleep(1)
        affinity = {pid: sorted(os.sched_getaffinity(pid)) for pid in pids}
        tried = None
        if final is not None:
            tried = {
                "lever": final.lever, "setting": final.setting_json, "cause": final.cause,
                "state": final.state, "speedup": final.speedup, "ci_low": final.ci_low,
                "ci_high": final.ci_high, "pairs": final.pairs, "reason": final.reason,
                "arms": [(a.arm, a.window_id, a.step_ms) for a in final.arms],
            }  # fmt: skip
        out("nccl-placement.json", {"experiment": tried, "affinity_after": affinity})
        assert final is not None, "no experiment was decided"
        assert final.lever in ("cpu_affinity", "sched_priority"), final
        if final.state == "promoted":
            assert final.ci_low >= 1.03, final
        if final.lever == "cpu_affinity":
            # all ranks or none: kept, both ranks on the trial's CPUs; not kept, each rank back on
            # its own (the slow rank on the CPUs it pinned itself to)
            slow = next(pid for pid, rank in pids.items() if rank == 1)
            if final.state == "promoted":
                want = sorted(json.loads(final.setting_json)["cpus"])
                assert all(cpus == want for cpus in affinity.values()), affinity
            else:
                assert affinity[slow] == [int(c) for c in PIN.split(",")], affinity
    finally:
        stop.touch()
        stdout, stderr = job.communicate(timeout=120)
        hog.kill()
        keep_log(d, "gitmd-nccl-pinned.log")
    assert job.returncode == 0, stderr[-3000:]
    steps, loss = result(stdout)
    plain = subprocess.run(
        torchrun(str(stop), "--steps", str(steps)), capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    plain_steps, plain_loss = result(plain.stdout)  # rank 0's loss, the plain run's at the same step
    assert plain_steps == steps, (steps, plain_steps)
    assert float(plain_loss) == pytest.approx(float(loss), rel=1e-5), (loss, plain_loss)
