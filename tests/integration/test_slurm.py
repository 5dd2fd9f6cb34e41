"""Slurm, for real: a single-node cluster (slurmctld, slurmd, munge from the distribution's
packages) with the project's Prolog, Epilog and TaskProlog, running `srun` steps as a real user.

Skipped, with the reason, only where Slurm cannot be installed or started (not root, no apt).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, SIM_CONFIG, Daemon, command, ctl, free_port

SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
USER = "gitmtest-slurm"
PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")


def _install() -> str | None:
    """None when Slurm is there (installed now if need be), else why not."""
    if all(shutil.which(t) for t in ("slurmctld", "slurmd", "srun", "munged")):
        return None
    if os.geteuid() != 0:
        return "Slurm is not installed and installing it needs root"
    if shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:  # stale package lists: refresh once
        subprocess.run(["apt-get", "update"], capture_output=True, env=env, timeout=600)
        r = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        return f"apt-get install {' '.join(PACKAGES)} failed: {r.stderr.strip()[-300:]}"
    return None


def _wrapper(path: Path, script: str, env: dict[str, str]) -> None:
    exports = "".join(f"export {k}='{v}'\n" for k, v in env.items())
    path.write_text(f'#!/bin/sh\n{exports}exec {ROOT / "packaging" / "slurm" / script} "$@"\n')
    path.chmod(0o755)


class Cluster:
    def __init__(self, top: Path, gitmd_socket: Path) -> None:
        self.top = top
        self.conf = top / "slurm.conf"
        self.plans = top / "plans"
        self.procs: list[subprocess.Popen[bytes]] = []
        host = socket.gethostname()
        wrap_env = {
            "GITMD_SOCKET": str(gitmd_socket),
            "GITMCTL": command("gitmctl")[0],
            "GITMD_SLURM_DIR": str(self.plans),
            "GITMD_BACKGROUND_PARTITIONS": "scavenger",
        }
        for script in ("gitmd-prolog", "gitmd-epilog", "gitmd-taskprolog"):
            _wrapper(top / script, script, wrap_env)
        for d in ("state", "spool"):
            (top / d).mkdir()
        self.conf.write_text(
            f"""ClusterName=gitmtest
SlurmctldHost={host}
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={top}/state
SlurmdSpoolDir={top}/spool
SlurmctldPidFile={top}/slurmctld.pid
SlurmdPidFile={top}/slurmd.pid
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmctldLogFile={top}/slurmctld.log
SlurmdLogFile={top}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
Prolog={top}/gitmd-prolog
Epilog={top}/gitmd-epilog
TaskProlog={top}/gitmd-taskprolog
PrologFlags=Alloc
NodeName={host} CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=scavenger Nodes=ALL Default=NO MaxTime=INFINITE State=UP
"""
        )
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
            Path("/run/munge").mkdir(exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(
                ["setpriv", "--reuid=munge", "--regid=munge", "--clear-groups", "munged"],
                check=True,
                timeout=30,
            )
        for daemon in ("slurmctld", "slurmd"):
            self.procs.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", str(self.conf)],
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm did not come up: {r.stdout} {r.stderr}")

    def srun(self, user: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        pw = pwd.getpwnam(user)
        return subprocess.run(
            [
                "setpriv",
                f"--reuid={pw.pw_uid}",
                f"--regid={pw.pw_gid}",
                "--init-groups",
                "srun",
                "-N1",
                "-n1",
                *argv,
            ],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/tmp",
        )

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def slurm() -> Iterator[tuple[Cluster, Daemon, pwd.struct_passwd]]:
    why = _install()
    if why:
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.skip("starting slurmd and creating a test user need root (CI runs as root)")
    made_user = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-N", "-s", "/bin/sh", USER], check=True, capture_output=True)
        made_user = True
    top = Path(tempfile.mkdtemp(prefix="gitmd-slurm-"))
    top.chmod(0o755)
    cfg = top / "gitmd.toml"
    cfg.write_text(SIM_CONFIG.format(port=0))
    gitmd = Daemon(prefix=top / "var", config=cfg).start()
    cluster = Cluster(top, gitmd.socket)
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        cluster.stop()
        gitmd.stop()
        pytest.skip(f"Slurm could not start here: {e}")
    yield cluster, gitmd, pwd.getpwnam(USER)
    cluster.stop()
    if gitmd.proc is not None and gitmd.proc.poll() is None:
        gitmd.stop()
    shutil.rmtree(top, ignore_errors=True)
    if made_user:
        subprocess.run(["userdel", USER], capture_output=True)


STEP = (
    'echo "slurm-job=$SLURM_JOB_ID"; '
    'env | grep -E "^(GITM_[A-Z_]*|CUDA_INJECTION64_PATH|LD_PRELOAD)=" | sort; exit {code}'
)


def _fields(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _closed(d: Daemon, job_id: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        view = json.loads(ctl(d.socket, "job", "--slurm-job", job_id, "--json").stdout)
        ended = any(e["action"] == "SchedulerJobEnd" for e in view.get("audit", []))
        # the Epilog's audit row is written after the jobs it closed (make test, 2026-12-03: the
        # view was read between the two)
        if view["jobs"] and all(j["state"] == "exited" for j in view["jobs"]) and ended:
            return view  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"the Epilog did not close Slurm job {job_id}: {view}")
        time.sleep(0.3)


def test_steps_are_registered_for_their_user_and_closed_by_the_epilog(
    slurm: tuple[Cluster, Daemon, pwd.struct_passwd],
) -> None:
    cluster, gitmd, user = slurm
    r = cluster.srun(USER, "sh", "-c", STEP.format(code=3))
    assert r.returncode == 3, r.stderr
    env = _fields(r.stdout)
    slurm_id = env["slurm-job"]
    assert env.get("GITM_JOB_ID"), r.stdout
    if SHIM.exists():
        assert env.get("CUDA_INJECTION64_PATH") == str(SHIM)
        assert env.get("GITM_JOB_DIR", "").endswith(env["GITM_JOB_ID"])
        guard = SHIM.parent / "libgitm_guard.so"
        if guard.exists():  # the free guard, first on the task's LD_PRELOAD
            assert env.get("GITM_GUARD") == str(guard)
            assert env.get("LD_PRELOAD", "").split(":")[0] == str(guard)
    view = _closed(gitmd, slurm_id)
    [job] = view["jobs"]
    assert job["id"] == env["GITM_JOB_ID"] and job["scheduler_job_id"] == slurm_id
    assert job["uid"] == user.pw_uid and job["user"] == USER
    assert job["exit_code"] == 3
    actions = [(e["actor"].split(" ")[0], e["action"]) for e in view["audit"]]
    assert actions == [
        ("uid", "SchedulerJobStart"),
        ("uid", "RegisterJob"),
        ("uid", "SchedulerJobEnd"),
    ], view["audit"]
    assert all(e["actor"].startswith("uid 0 ") for e in view["audit"])  # the root Prolog/Epilog
    assert not (cluster.plans / f"{slurm_id}.env").exists()  # the Epilog removed the plan
    text = ctl(gitmd.socket, "job", "--slurm-job", slurm_id).stdout
    assert env["GITM_JOB_ID"] in text and "SchedulerJobEnd" in text


def test_a_job_of_a_background_partition_is_registered_as_background(
    slurm: tuple[Cluster, Daemon, pwd.struct_passwd],
) -> None:
    cluster, gitmd, _ = slurm
    for partition, background in (("scavenger", True), ("test", False)):
        r = cluster.srun(USER, "-p", partition, "sh", "-c", STEP.format(code=0))
        assert r.returncode == 0, r.stderr
        slurm_id = _fields(r.stdout)["slurm-job"]
        view = _closed(gitmd, slurm_id)
        [job] = view["jobs"]
        assert bool(job.get("background", False)) is background, (partition, job)


def test_with_gitmd_stopped_the_same_srun_runs_untouched(
    slurm: tuple[Cluster, Daemon, pwd.struct_passwd],
) -> None:
    cluster, gitmd, _ = slurm
    gitmd.stop()
    try:
        t = time.monotonic()
        r = cluster.srun(USER, "sh", "-c", STEP.format(code=0))
        took = time.monotonic() - t
        assert r.returncode == 0, r.stderr
        env = _fields(r.stdout)
        assert set(env) == {"slurm-job"}, r.stdout  # no gitmd variable at all
        assert took < 20, took
    finally:
        gitmd.start()
