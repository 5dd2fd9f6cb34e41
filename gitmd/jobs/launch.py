"""Launch plans: what a launcher adds to a job's environment so the shim loads and finds its ring
directory. The shim path is the configured one, else the installed one, else the source build."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

INSTALLED_SHIM = Path("/usr/lib/gitmd/libgitm_shim.so")
SOURCE_SHIM = Path(__file__).resolve().parents[2] / "shim" / "build" / "libgitm_shim.so"
GUARD_NAME = "libgitm_guard.so"
CLOCK_NAME = "libgitm_clock.so"
CLOCK_PLAN_VAR = "GITM_CLOCK"  # gitmctl/launch.py: the launcher's side


@dataclass(frozen=True)
class LaunchPlan:
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    capture: bool = False
    workload_id: str = ""
    policy_id: int = 0
    policy_status: str = ""
    trial: str = ""  # a launch trial's arm for this launch, in words
    cpus: tuple[int, ...] = ()  # the job's CPUs from its exec (a validated cpu_affinity policy)


def find_shim(configured: Path | None) -> tuple[Path | None, str | None]:
    """The shim to inject, or None with the reason."""
    if configured is not None:
        if configured.is_file():
            return configured, None
        return None, f"capture.shim_path {configured} does not exist"
    for candidate in (INSTALLED_SHIM, SOURCE_SHIM):
        if candidate.is_file():
            return candidate, None
    return None, (
        f"no shim found ({INSTALLED_SHIM} or {SOURCE_SHIM}); build it with `make -C shim` "
        "(needs a CUDA toolkit with CUPTI)"
    )


def find_guard(shim: Path) -> Path | None:
    """libgitm_guard.so, built and installed next to the shim; None if absent."""
    guard = shim.parent / GUARD_NAME
    return guard if guard.is_file() else None


def find_clock(shim: Path) -> Path | None:
    """libgitm_clock.so (shim/src/clock.c), built and installed next to the shim; None if absent."""
    clock = shim.parent / CLOCK_NAME
    return clock if clock.is_file() else None


# what build_plan adds for the shim (GITM_JOB_ID stays: it names the job to gitmd's sitecustomize)
SHIM_ENV = (
    "GITM_JOB_DIR", "CUDA_INJECTION64_PATH", "GITM_RING_RECORDS", "GITM_SHIM_DETACH", "GITM_GUARD",
    "GITM_CUPTI_PATH", CLOCK_PLAN_VAR,
)  # fmt: skip


def clock_env(plan_env: dict[str, str]) -> dict[str, str]:
    """A plan's environment for a run that goes without the shim (no window will open on it): the
    shim's variables out, and gitmd's clock library in its place where it is installed beside the
    shim (CUDA_INJECTION64_PATH, and GITM_CLOCK for the launcher: it names a file the library
    stamps with each process's CUDA start, and reports the run's length from there,
    gitmctl/launch.py). The library loads no CUPTI and does nothing else: the run is timed on the
    shim's milestones without what the shim costs."""
    env = {k: v for k, v in plan_env.items() if k not in SHIM_ENV}
    shim = plan_env.get("CUDA_INJECTION64_PATH")
    clock = find_clock(Path(shim)) if shim else None
    if clock is not None:
        env["CUDA_INJECTION64_PATH"] = str(clock)
        env[CLOCK_PLAN_VAR] = "1"
    return env


def build_plan(
    job_id: str,
    job_dir: Path | None,
    shim: Path | None,
    ring_records: int,
    warnings: list[str],
    free_guard: bool = True,
    detach_cupti: bool = False,
    cupti_path: Path | None = None,
) -> LaunchPlan:
    """``GITM_GUARD`` names the free guard; launchers put it first on LD_PRELOAD (job_environment).
    ``detach_cupti``: the shim may detach CUPTI once when gitmd ends a process's observation
    (GITM_SHIM_DETACH=1; capture.detach_cupti). ``cupti_path``: the libcupti the shim opens
    (GITM_CUPTI_PATH; capture.cupti_path); None: the shim looks for it (the dynamic linker's search,
    then the usual places of a CUDA toolkit)."""
    env = {"GITM_JOB_ID": job_id}
    capture = job_dir is not None and shim is not None
    if capture:
        assert job_dir is not None and shim is not None
        env["GITM_JOB_DIR"] = str(job_dir)
        env["CUDA_INJECTION64_PATH"] = str(shim)
        env["GITM_RING_RECORDS"] = str(ring_records)
        if detach_cupti:
            env["GITM_SHIM_DETACH"] = "1"
        if cupti_path is not None:
            env["GITM_CUPTI_PATH"] = str(cupti_path)
        guard = find_guard(shim) if free_guard else None
        if guard is not None:
            env["GITM_GUARD"] = str(guard)
    return LaunchPlan(env=env, warnings=tuple(warnings), capture=capture)


def make_job_dir(parent: Path, job_id: str, uid: int, gid: int) -> tuple[Path | None, str | None]:
    """<runtime>/jobs/<id>, mode 0700, owned by the job's user; None with the reason on failure."""
    path = parent / job_id
    try:
        try:
            os.mkdir(path, 0o700)
        except FileNotFoundError:  # the first job: make <runtime>/jobs
            parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
    except OSError as e:
        return None, f"cannot create the job's runtime directory {path}: {e.strerror}; the job runs untraced"
    if os.geteuid() == 0:
        try:
            os.chown(path, uid, gid, follow_symlinks=False)
        except OSError as e:
            return None, f"cannot give {path} to uid {uid}: {e.strerror}; the job runs untraced"
    elif uid != os.geteuid():
        return None, (
            f"gitmd runs as uid {os.geteuid()} and cannot give {path} to uid {uid}; the job runs untraced"
        )
    return path, None
