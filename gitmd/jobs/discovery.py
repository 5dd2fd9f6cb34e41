"""GPU processes that gitmd did not launch: found in the telemetry's process lists (NVML) and /proc,
shown with why they cannot be traced and the exact command that would relaunch them under gitmd."""

from __future__ import annotations

import pwd
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitmd.telemetry.backend import GpuSample


@dataclass(frozen=True)
class UntrackedProcess:
    pid: int
    gpu_index: int
    used_memory_bytes: int | None
    name: str
    user: str
    command: tuple[str, ...]
    cwd: str
    reason: str
    relaunch: str


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _user(status: bytes | None) -> str:
    for line in (status or b"").decode(errors="replace").splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
    return ""


def describe(
    pid: int, gpu_index: int, used: int | None, name: str, proc: Path = Path("/proc")
) -> UntrackedProcess:
    base = proc / str(pid)
    raw = _read(base / "cmdline")
    if raw is None:
        return UntrackedProcess(
            pid,
            gpu_index,
            used,
            name,
            "",
            (),
            "",
            "not visible from gitmd (another PID namespace, or it has exited)",
            "",
        )
    command = tuple(a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0") if a)
    try:
        cwd = str((base / "cwd").readlink())
    except OSError:
        cwd = ""
    env = _read(base / "environ")
    if env is not None and b"GITM_JOB_ID=" in env:
        reason = (
            "launched through gitmd, but its shim is not capturing (no CUDA_INJECTION64_PATH, "
            "or the shim could not create its ring)"
        )
    else:
        reason = "not launched through gitmd: no shim in it, so it cannot be traced or tuned"
    label = (name or (Path(command[0]).name if command else "job")).replace(" ", "_")
    relaunch = (f"cd {shlex.quote(cwd)} && " if cwd else "") + f"gitmctl run --name {shlex.quote(label)} -- "
    relaunch += shlex.join(command)
    return UntrackedProcess(
        pid, gpu_index, used, name, _user(_read(base / "status")), command, cwd, reason, relaunch
    )


def shimless_job_of(pid: int, shimless: Mapping[str, int], proc: Path = Path("/proc")) -> str:
    """The running job without the shim (``shimless``: job id -> its uid) that this process is a
    run of: its environment names the job (GITM_JOB_ID, as gitmctl run sets it) and it runs as that
    job's user (an environment is the user's to write: a process of another user naming the job is
    not its). "" : none."""
    env = _read(proc / str(pid) / "environ")
    if not env or not shimless:
        return ""
    named = (v[12:].decode(errors="replace") for v in env.split(b"\0") if v.startswith(b"GITM_JOB_ID="))
    job = next(named, "")
    if job not in shimless:
        return ""
    for line in (_read(proc / str(pid) / "status") or b"").decode(errors="replace").splitlines():
        if line.startswith("Uid:"):
            return job if int(line.split()[1]) == shimless[job] else ""
    return ""


def untracked(
    samples: list[GpuSample], tracked_pids: set[int], own_pid: int, shimless: Mapping[str, int] | None = None
) -> list[UntrackedProcess]:
    """GPU processes no job accounts for. ``shimless``: the running jobs gitmd launched without the
    shim (a run the observation backoff leaves unobserved), job id -> uid: their processes are theirs."""
    out = []
    for s in samples:
        for p in s.processes:
            if p.pid in tracked_pids or p.pid == own_pid:
                continue
            if shimless and shimless_job_of(p.pid, shimless):
                continue
            out.append(describe(p.pid, s.gpu_index, p.used_memory_bytes, p.name))
    return out
