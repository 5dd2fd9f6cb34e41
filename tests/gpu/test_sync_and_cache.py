"""Two levers for stalls the catalog could not recover before (sixth session), on the H200:
sync_spin — a training loop that synchronizes every step under blocking sync: gitmd, unattended,
attributes sync_stall and switches the context to spin through the shim (the knob read back first,
restored after); alloc_keep_cache — a program that empties PyTorch's cache every step: `gitmctl
tune` keeps the cache across launches only if it is faster with the same checksum."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitmd.levers.base import Target
from gitmd.levers.registry import make
from gitmd.levers.shim_knobs import AllocKeepCacheLive
from tests.gpu.test_experiments import CONFIG, W, decided, job_pid, keep_log, out, stop
from tests.gpu.test_pin_host_buffer import _rings
from tests.gpu.test_tune import tune
from tests.integration.conftest import Daemon, command, free_port


def launched(d: Daemon, name: str, script: str) -> subprocess.Popen[str]:
    """The workload under `gitmctl run --name NAME` for 150 s, its stdout piped."""
    return subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--name", name, "--",
         sys.executable, str(W / script), "--seconds", "150"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def ready_target(d: Daemon, job: subprocess.Popen[str], name: str) -> tuple[int, Target]:
    """Once the job says it is ready: its process and a lever target naming its shim's ring."""
    assert job.stdout is not None and job.stdout.readline().strip() == "ready"
    pid = job_pid(d, name)
    ring = next(p for p in _rings(d, name) if p.name.startswith(f"ring-{pid}-"))
    return pid, Target(job_id=name, pids=(pid,), rings={pid: str(ring)}, owner_uid=os.getuid())


@pytest.mark.timeout(300)
def test_a_blocking_sync_loop_gets_spin_unattended(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    job = launched(d, "sync", "sync_every_step.py")
    record: dict[str, Any] = {}
    try:
        pid, target = ready_target(d, job, "sync")  # its context exists
        knob = make("sync_spin", pid=pid, device=0)
        record["sched_at_start"] = knob.capture(target)
        assert record["sched_at_start"] == {"sched": 4}  # the program's blocking sync, read back
        final = decided(d, "sync", "sync_spin", record, 120)
        assert final is not None, f"no sync_spin experiment was decided: {record['tried']}"
        record["sched_after"] = knob.capture(target)
        assert final.cause == "sync_stall" and final.state == "promoted", final.reason
        assert record["sched_after"] == {"sched": 1}  # promoted: the context spins now
    finally:
        why = subprocess.run([*command("gitmctl"), "--socket", str(d.socket), "explain", "sync", "--json"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        record["explain"] = why.stdout or why.stderr
        out("sync-spin.json", record)
        keep_log(d, "gitmd-sync-spin.log")
        stop(job)


@pytest.mark.timeout(300)
def test_a_job_emptying_the_cache_every_step_keeps_it_live(daemon_factory: Any) -> None:
    """alloc_keep_cache_live, unattended: the job's torch.cuda.empty_cache() (gitmd's sitecustomize,
    on its path as GITMD_LIVE_FLAGS=1) reads the shim's keep-cache flag at every call; gitmd
    attributes the allocator stall, sets the flag in treatment windows only, and keeps it set once
    faster, within the run, with no launch trial planned for the launch form."""
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    job = launched(d, "cache", "alloc_churn.py")
    record: dict[str, Any] = {}
    try:
        pid, target = ready_target(d, job, "cache")
        knob = make("alloc_keep_cache_live", pid=pid)
        assert isinstance(knob, AllocKeepCacheLive)
        record["flag_at_start"] = knob.read(target)
        keep, reads = record["flag_at_start"]
        assert keep == 0 and reads > 0, record  # the hook in real torch asks the real shim
        final = decided(d, "cache", "alloc_keep_cache_live", record, 120)
        assert final is not None, f"no alloc_keep_cache_live experiment was decided: {record['tried']}"
        record["flag_after"] = knob.read(target)
        assert final.cause == "allocator" and final.state == "promoted", final.reason
        assert record["flag_after"][0] == 1 and record["flag_after"][1] > reads
        ctl = [*command("gitmctl"), "--socket", str(d.socket), "library"]
        listed = json.loads(subprocess.run([*ctl, "list", "--json"], capture_output=True, text=True,
                                           timeout=60, check=True).stdout)  # fmt: skip
        shown = [
            subprocess.run(
                [*ctl, "show", w["id"], "--json"], capture_output=True, text=True, timeout=60
            ).stdout
            for w in listed.get("workloads", [])
        ]
        record["workloads"] = shown
        assert not any('"alloc_keep_cache"' in x for x in shown)  # no launch trial of the launch form
    finally:
        out("keep-cache-live.json", record)
        keep_log(d, "gitmd-keep-cache-live.log")
        stop(job)


@pytest.mark.timeout(300)
def test_a_job_emptying_the_cache_every_step_keeps_it(daemon_factory: Any, tmp_path: Path) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    try:
        # 6-s runs: long enough for a capture window to see the reference run's steps (a policy
        # attaches to the workload those steps fingerprint; 400 steps were 0.2 s and got none)
        res = tune(d, tmp_path, "--levers", "alloc_keep_cache", "--metric", r"checksum=(\S+)",
                   "--time", r"step_ms=(\S+)", "--", sys.executable, str(W / "alloc_churn.py"),
                   "--seconds", "6")  # fmt: skip
        out("tune-alloc-keep-cache.json", res)
        (e,) = [x for x in res["experiments"] if x["lever"] == "alloc_keep_cache"]
        assert e["state"] == "promoted", e["reason"]
        assert "policy" in res, res.get("note")
        assert res["policy"]["env"].get("GITMD_KEEP_CACHE") == "1"
    finally:
        keep_log(d, "gitmd-tune-keep-cache.log")
