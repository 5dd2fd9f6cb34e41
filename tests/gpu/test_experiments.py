"""Live experiments on the H200, gitmd unattended: a launch-bound job sharing its two cores with
six busy processes. gitmd's attribution finds host contention, tries cpu_affinity (quiet cores) in
interleaved windows, and promotes it; killed with SIGKILL in the middle of a treatment window and
restarted, it puts the job back where it was, and the job finishes unharmed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gitmd.api.client_auth import open_channel
from gitmd.api.pb import pb, pb_grpc
from tests.integration.conftest import ROOT, Daemon, command, free_port

W = ROOT / "bench" / "workloads"
PIN = {2, 3}
CONFIG = """
[telemetry]
backend = "nvml"
[metrics]
port = {port}
[capture]
keep_windows = 8
window_every_s = 2
window_duration_s = 1.0
# these tests are of levers, not of start-up: their programs' first windows come at once, as they did
# when they passed on the H200 (the default wait is the settle test's and the scoreboard's)
settle_s = 0
[experiments]
rounds = 4
settle_s = 0.5
"""


def out(name: str, data: Any) -> None:
    d = os.environ.get("GITMD_GPU_OUT")
    if d:
        Path(d, name).write_text(json.dumps(data, indent=2, default=str))


def experiments(d: Daemon, job: str) -> list[Any]:
    with open_channel(d.socket) as ch:
        try:
            return list(
                pb_grpc.GitmdStub(ch)
                .GetExperiment(pb.GetExperimentRequest(job_id=job), timeout=10)
                .experiments
            )
        except Exception:
            return []


def decided(d: Daemon, job: str, lever: str, record: dict[str, Any], timeout_s: float) -> Any:
    """The job's experiment on ``lever`` once decided (None if not within ``timeout_s``); every
    experiment tried on the job goes to ``record["tried"]``, the decided one's figures too."""
    deadline = time.monotonic() + timeout_s
    final = None
    while time.monotonic() < deadline and final is None:
        final = next(
            (e for e in experiments(d, job) if e.lever == lever
             and e.state in ("promoted", "reverted", "failed", "abandoned")),
            None,
        )  # fmt: skip
        time.sleep(1)
    record["tried"] = [(e.lever, e.cause, e.state, e.reason) for e in experiments(d, job)]
    if final is not None:
        record.update(speedup=final.speedup, ci=(final.ci_low, final.ci_high), reason=final.reason,
                      arms=[(a.arm, a.window_id, a.step_ms) for a in final.arms])  # fmt: skip
    return final


def start(d: Daemon, name: str, *args: str) -> tuple[subprocess.Popen[str], subprocess.Popen[bytes]]:
    hog = subprocess.Popen(
        ["taskset", "-c", "2,3", sys.executable, str(W / "cpu_hog.py"), "--procs", "6", "--seconds", "400"]
    )
    # its stderr to a file, not a pipe read only at its end: under GITM_SHIM_DEBUG=1 the shim's lines
    # would fill a pipe and block CUPTI's and the shim's threads in write(2)
    err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read at the test's end (keep_job_output)
    job = subprocess.Popen(
        ["taskset", "-c", "2,3", *command("gitmctl"), "--socket", str(d.socket), "run", "--name", name, "--",
         sys.executable, str(W / "launch_bound.py"), *args],
        stdout=subprocess.PIPE, stderr=err, text=True,
    )  # fmt: skip
    job.err_file = err  # type: ignore[attr-defined]
    return job, hog


def job_pid(d: Daemon, name: str, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d.socket), "job", name, "--json"],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0 and json.loads(r.stdout).get("processes"):
            return int(json.loads(r.stdout)["processes"][0]["pid"])
        time.sleep(0.3)
    raise AssertionError("the job's process never appeared")


@pytest.fixture
def gpu_daemon(daemon_factory: Any) -> Daemon:
    if len(os.sched_getaffinity(0)) < 8:
        pytest.skip("needs 8 CPUs")
    return daemon_factory(config_text=CONFIG.format(port=free_port()))  # type: ignore[no-any-return]


def stop(job: subprocess.Popen[Any]) -> None:
    """A test's job, still running at its end: SIGTERM, as its launcher would, and wait."""
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
        job.wait(60)


def keep_log(d: Daemon, name: str) -> None:
    """The daemon's log, and the windows it kept (capture.keep_windows), next to the test's output."""
    o = os.environ.get("GITMD_GPU_OUT")
    if o:
        Path(o, name).write_text(d.log()[-200_000:])
        kept = d.prefix / "lib" / "windows"
        if kept.is_dir():
            shutil.copytree(kept, Path(o, f"{Path(name).stem}-windows"), dirs_exist_ok=True)


def keep_job_output(name: str, stdout: str, job: subprocess.Popen[str]) -> None:
    """The job's own output (the shim's lines too, under GITM_SHIM_DEBUG=1) next to the test's."""
    err = job.err_file  # type: ignore[attr-defined]
    err.seek(0)
    stderr = err.read()
    err.close()
    o = os.environ.get("GITMD_GPU_OUT")
    if o:
        Path(o, f"job-{name}.log").write_text(f"{stdout[-100_000:]}\n--- stderr ---\n{stderr[-400_000:]}")


@pytest.mark.timeout(420)
def test_cpu_affinity_is_promoted_on_a_contended_running_job(gpu_daemon: Daemon) -> None:
    d = gpu_daemon
    job, hog = start(d, "contended", "--seconds", "120")
    try:
        pid = job_pid(d, "contended")
        deadline = time.monotonic() + 110
        final = None
        while time.monotonic() < deadline and final is None:
            exps = experiments(d, "contended")
            final = next(
                (e for e in exps if e.state in ("promoted", "reverted", "failed", "abandoned")), None
            )
            time.sleep(1)
        assert final is not None, "no experiment was decided"
        affinity = os.sched_getaffinity(pid)
        out("experiment-promoted.json", {"experiment": json.loads(json.dumps({
            "lever": final.lever, "setting": final.setting_json, "cause": final.cause, "state": final.state,
            "speedup": final.speedup, "ci_low": final.ci_low, "ci_high": final.ci_high, "pairs": final.pairs,
            "reason": final.reason, "arms": [(a.arm, a.window_id, a.step_ms) for a in final.arms]})),
            "affinity_after": sorted(affinity)})  # fmt: skip
        assert final.lever == "cpu_affinity" and final.cause == "host_contention", final
        assert final.state == "promoted", final.reason
        assert final.ci_low >= 1.03
        assert affinity == set(json.loads(final.setting_json)["cpus"]) and not affinity & PIN
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d.socket), "explain", "contended"],
            capture_output=True,
            text=True,
        )
        assert "tried:" in r.stdout and "promoted" in r.stdout, r.stdout + r.stderr
    finally:
        keep_log(d, "gitmd-promote.log")
        hog.kill()
        job.send_signal(signal.SIGTERM)
        stdout, _ = job.communicate(timeout=60)
        keep_job_output("contended", stdout, job)


@pytest.mark.timeout(420)
def test_gitmd_killed_in_a_treatment_window_reverts_at_restart(gpu_daemon: Daemon) -> None:
    d = gpu_daemon
    steps = "250000"
    plain = subprocess.Popen(  # the same program untouched, alongside: its output is the reference
        [sys.executable, str(W / "launch_bound.py"), "--steps", steps], stdout=subprocess.PIPE, text=True
    )
    job, hog = start(d, "killed", "--steps", steps)
    try:
        pid = job_pid(d, "killed")
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            exps = experiments(d, "killed")
            if any(e.state == "treatment" for e in exps) and os.sched_getaffinity(pid) != PIN:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("no treatment window was seen")
        during = os.sched_getaffinity(pid)
        assert d.proc is not None
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(30)
        assert os.sched_getaffinity(pid) == during  # nobody reverted it: gitmd is dead
        d.start()
        assert os.sched_getaffinity(pid) == PIN  # reverted before the restarted gitmd served
        stdout, _ = job.communicate(timeout=300)
        reference, _ = plain.communicate(timeout=300)
        assert job.returncode == 0 and plain.returncode == 0
        assert stdout.split()[-1] == reference.split()[-1]  # same checksum (step_ms differs)
        out(
            "experiment-sigkill.json",
            {
                "affinity_during": sorted(during),
                "after_restart": sorted(PIN),
                "result": stdout.splitlines()[-1],
            },
        )
    finally:
        keep_log(d, "gitmd-sigkill.log")
        hog.kill()
        for p in (job, plain):
            if p.poll() is None:
                p.kill()
