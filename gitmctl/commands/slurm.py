"""`gitmctl slurm prolog|epilog`: what packaging/slurm's scripts run as root on each node.

prolog   (Slurm's Prolog, once per job and node, as root): tells gitmd the job started, registers it
         on behalf of its user (uid from Slurm, GPUs from SLURM_JOB_GPUS, launch key from the job's
         command and working directory; a job of a partition named in --background-partitions as a
         background job, which yields its GPU to foreground jobs) and stores the launch plan as
         ``export NAME=value`` lines in
         ``<plan-dir>/<job id>.env`` (owned by the job's user, mode 0600) for the TaskProlog to print.
epilog   (Slurm's Epilog, as root): gitmd closes every gitmd job of this Slurm job (its live
         interventions reverted, its exit recorded) and the plan file is removed.

Both always exit 0: a scheduler must never fail or drain a node because of gitmd. What went wrong is
said on stderr (Slurm's slurmd log).
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from gitmctl.client import Client, ClientError, pb

NAME = "slurm"
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="Slurm Prolog/Epilog helpers (run by packaging/slurm)")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("prolog", "a job starts on this node"), ("epilog", "a job ended on this node")):
        a = acts.add_parser(action, parents=[common], help=text)
        a.add_argument(
            "--plan-dir", type=Path, default=Path("/run/gitmd/slurm"), help="where launch plans are kept"
        )
        if action == "prolog":
            a.add_argument(
                "--background-partitions",
                default="",
                help="comma-separated partitions whose jobs yield their GPUs to others (e.g. preemptible)",
            )


def _say(text: str) -> None:
    print(f"gitmd-slurm: {text}", file=sys.stderr)


def _gpus(text: str) -> list[int]:
    """SLURM_JOB_GPUS / SLURM_STEP_GPUS: "0,1" (indices); anything else is ignored."""
    out = []
    for part in text.split(","):
        if part.strip().isdigit():
            out.append(int(part))
    return out


def _scontrol_job(job_id: str) -> dict[str, str]:
    """Command, WorkDir and JobName of the job from `scontrol show job -o` (empty if unavailable)."""
    try:
        r = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields: dict[str, str] = {}
    for key in ("Command", "WorkDir", "JobName"):
        m = re.search(rf"(?:^|\s){key}=(.*?)(?=\s[A-Za-z:]+=|$)", r.stdout)
        if m and m.group(1) not in ("(null)", ""):
            fields[key] = m.group(1)
    return fields


def _plan_dir(path: Path) -> Path | None:
    """The plan directory, created root-owned 0755; refused if anyone else could write there."""
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        _say(f"cannot use {path}: {e.strerror}")
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        _say(f"{path} must be a directory owned by uid {os.geteuid()} and writable by it alone")
        return None
    return path


def _write_plan(directory: Path, job_id: str, env: dict[str, str], uid: int, gid: int) -> None:
    lines = [
        f"export {k}={v}\n"
        for k, v in sorted(env.items())
        if _ENV_NAME.match(k) and "\n" not in v and "\0" not in v
    ]
    path = directory / f"{job_id}.env"
    try:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, uid, gid)
            os.write(fd, "".join(lines).encode())
        finally:
            os.close(fd)
    except OSError as e:
        _say(f"cannot write the launch plan {path}: {e.strerror}")


def _job_id() -> str | None:
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not _JOB_ID.match(job_id):
        _say(f"SLURM_JOB_ID {job_id!r} is not a Slurm job id; nothing done")
        return None
    return job_id


def prolog(args: argparse.Namespace, client: Client) -> None:
    env = os.environ
    job_id = _job_id()
    if job_id is None:
        return
    try:
        uid, gid = int(env.get("SLURM_JOB_UID", "")), int(env.get("SLURM_JOB_GID", ""))
    except ValueError:
        _say("SLURM_JOB_UID/SLURM_JOB_GID missing; nothing done")
        return
    gpus = _gpus(env.get("SLURM_JOB_GPUS", ""))
    info = _scontrol_job(job_id)
    cwd = info.get("WorkDir") or env.get("SLURM_JOB_WORK_DIR", "")
    command = [info["Command"]] if info.get("Command") else []
    name = info.get("JobName") or env.get("SLURM_JOB_NAME", "")
    client.call(
        client.stub.ReportSchedulerJob,
        pb.SchedulerJobEvent(
            scheduler_job_id=job_id,
            event="start",
            uid=uid,
            gpus=gpus,
            detail=f"user {env.get('SLURM_JOB_USER', '?')} partition {env.get('SLURM_JOB_PARTITION', '?')} "
            f"name {name or '?'}",
        ),
    )
    resp = client.call(
        client.stub.RegisterJob,
        pb.RegisterJobRequest(
            name=f"slurm-{job_id}",
            command=command,
            cwd=cwd,
            uid=uid,
            gid=gid,
            capture=True,
            gpus=gpus,
            launch_key="" if command else f"slurm-job-name:{name}",
            scheduler_job_id=job_id,
            scheduler_closes=True,
            background=env.get("SLURM_JOB_PARTITION", "")
            in {x.strip() for x in args.background_partitions.split(",") if x.strip()},
        ),
    )
    for w in resp.plan.warnings:
        _say(f"job {job_id}: {w}")
    directory = _plan_dir(args.plan_dir)
    if directory is not None:
        _write_plan(directory, job_id, dict(resp.plan.env), uid, gid)


def epilog(args: argparse.Namespace, client: Client) -> None:
    env = os.environ
    job_id = _job_id()
    if job_id is None:
        return
    plan = args.plan_dir / f"{job_id}.env"
    try:
        plan.unlink(missing_ok=True)
    except OSError as e:
        _say(f"cannot remove {plan}: {e.strerror}")
    code_text = env.get("SLURM_JOB_EXIT_CODE2", "").split(":")[0]
    if code_text.isdigit():
        code = int(code_text)
    else:
        raw = env.get("SLURM_JOB_EXIT_CODE", "0")
        code = int(raw) >> 8 if raw.isdigit() else 0
    client.call(
        client.stub.ReportSchedulerJob,
        pb.SchedulerJobEvent(scheduler_job_id=job_id, event="end", exit_code=code),
    )


def run(args: argparse.Namespace, client: Client) -> int:
    try:
        (prolog if args.action == "prolog" else epilog)(args, client)
    except ClientError as e:
        _say(str(e).splitlines()[0])
    return 0
