"""`gitmctl job ID`: one job in detail."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from gitmctl import render
from gitmctl.client import EXIT_NOT_FOUND, EXIT_USAGE, Client, ClientError, pb

NAME = "job"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="one job in detail, or what gitmd did to a Slurm job")
    p.add_argument("job", nargs="?", help="job id or name")
    p.add_argument(
        "--slurm-job",
        metavar="ID",
        default="",
        help="the gitmd jobs of this Slurm (scheduler) job id and the audit trail about it",
    )


def scheduler_job(args: argparse.Namespace, client: Client) -> int:
    jobs = client.call(client.stub.ListJobs, pb.ListJobsRequest(all=True, scheduler_job_id=args.slurm_job))
    try:
        trail = client.call(
            client.stub.ListAudit, pb.ListAuditRequest(scheduler_job_id=args.slurm_job, limit=1000)
        ).entries
        note = ""
    except ClientError as e:  # the audit needs the reader role; a job's owner still sees the jobs
        trail, note = [], str(e)
    if args.json:
        render.print_json(
            {
                "scheduler_job_id": args.slurm_job,
                "jobs": [render.to_dict(j) for j in jobs.jobs],
                "audit": [render.to_dict(e) for e in reversed(trail)],
            }
        )
        return 0
    if not jobs.jobs and not trail:
        print(f"gitmctl: nothing known about scheduler job {args.slurm_job}", file=sys.stderr)
        return EXIT_NOT_FOUND
    render.table(
        ("JOB", "NAME", "USER", "STATE", "EXIT", "GPUS", "CAPTURE", "POLICY"),
        [
            (
                j.id,
                j.name,
                j.user,
                j.state,
                str(j.exit_code) if j.HasField("exit_code") else "-",
                ",".join(map(str, j.gpus)) or "-",
                "on" if j.capture else "off",
                str(j.policy_id) if j.policy_id else "-",
            )
            for j in jobs.jobs
        ],
    )
    if trail:
        print()
        render.table(
            ("WHEN", "WHO", "ACTION", "TARGET", "OUTCOME", "DETAIL"),
            [
                (render.clock_h(e.at_unix_ns), e.actor, e.action, e.target, e.outcome, e.detail[:70])
                for e in reversed(trail)
            ],
        )
    elif note:
        print(f"\n(audit not shown: {note})")
    return 0


def run(args: argparse.Namespace, client: Client) -> int:
    if args.slurm_job:
        return scheduler_job(args, client)
    if not args.job:
        print("gitmctl job: give a job id or name, or --slurm-job ID", file=sys.stderr)
        return EXIT_USAGE
    j = client.call(client.stub.GetJob, pb.GetJobRequest(job_id=args.job))
    if args.json:
        render.print_json(j)
        return 0
    render.table(
        ("", ""),
        [
            ("id", j.id),
            ("name", j.name),
            ("state", j.state + (f", exit {j.exit_code}" if j.HasField("exit_code") else "")),
            *([("loop", j.phase)] if j.phase else []),
            *([("crash", j.crash)] if j.crash else []),
            *([("run", f"{j.run_s:.1f} s by its own clock (CUDA start to exit)")] if j.run_s else []),
            *([("wall", f"{j.wall_s:.1f} s by its launcher (exec to exit)")] if j.wall_s else []),
            *([("gitmd's cost", cost_line(j.cost_json))] if j.cost_json else []),
            ("command", shlex.join(j.command)),
            ("cwd", j.cwd or "-"),
            ("capture", ("on, " + j.runtime_dir) if j.capture else "off"),
            ("windows", str(j.windows)),
            ("user", f"{j.user} ({j.uid})"),
            ("gpus", ",".join(map(str, j.gpus)) or "-"),
            ("scheduler job", j.scheduler_job_id or "-"),
            ("exploration", "allowed" if j.allow_exploration else "off (known-good policies only)"),
            ("priority", "background (yields its GPU to foreground jobs)" if j.background else "foreground"),
            (
                "contract",
                ", ".join(_check(c) for c in j.contract.checks) or "default (exit status, payload samples)",
            ),
            ("launch key", j.launch_key or "-"),
            ("workload", j.workload_id or "- (not fingerprinted yet)"),
            ("policy", str(j.policy_id) if j.policy_id else "-"),
        ],
    )
    if j.HasField("step"):
        print()
        print(step_line(j.step))
    if j.processes:
        print()
        render.table(*process_table(j))
    return 0


def process_table(j: Any) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The job's processes, rank order first for a distributed job (a RANK column then)."""
    ranked = any(p.HasField("rank") for p in j.processes)
    procs = sorted(j.processes, key=lambda p: (p.rank if p.HasField("rank") else -1, p.pid))
    head = ("PID", *(("RANK",) if ranked else ()), "GPUS", "ALIVE", "SHIM", "WINDOWS/DETACHED", "RECORDS",
            "DROPS RING/CUPTI", "REASON")  # fmt: skip
    rows = [
        (
            str(p.pid),
            *((rank_cell(p),) if ranked else ()),
            ",".join(map(str, p.gpus)) or "-",
            "yes" if p.alive else "no",
            p.status,
            f"{p.windows_opened}/{p.detaches}",
            str(p.records_written),
            f"{p.ring_drops}/{p.cupti_drops}",
            p.reason,
        )
        for p in procs
    ]
    return head, rows


def rank_cell(p: Any) -> str:
    """A process's rank as `rank/world` (its local rank after), "-" for one launched alone."""
    if not p.HasField("rank"):
        return "-"
    local = f" (local {p.local_rank})" if p.HasField("local_rank") else ""
    return f"{p.rank}/{p.world_size}{local}"


def step_line(st: Any) -> str:
    if not st.found:
        return f"step: none found in window {st.window_id} ({st.reason})"
    return (
        f"step: {st.median_ms:.3f} ms median (p10 {st.p10_ms:.3f}, p90 {st.p90_ms:.3f}) "
        f"over {st.steps} steps of {st.period_kernels} kernels in pid {st.pid}, "
        f"window {st.window_id}, confidence {st.confidence:.2f}"
    )


def _check(c: Any) -> str:
    if c.kind == "stdout_metric":
        return f"stdout /{c.regex}/ rtol {c.rtol:g}"
    if c.kind == "output_file":
        return f"{c.path} ({c.compare}{f' rtol {c.rtol:g}' if c.compare == 'numeric' else ''})"
    return c.kind


def cost_line(cost_json: str) -> str:
    """What gitmd cost the run, in one line: its share, then what it is made of."""
    try:
        c = json.loads(cost_json)
    except ValueError:
        return cost_json[:200]
    share = "share not known"
    if c.get("share") is not None:
        measured = c.get("measured_share") or 0.0
        share = f"{100 * c['share']:.1f}% of the run ({100 * measured:.1f}% measured, the rest modelled)"
        launcher = c.get("launcher_s")
        if launcher is not None and c.get("total_share") is not None:
            share = (
                f"{100 * c['total_share']:.1f}% of the run with its launcher's {1000 * launcher:.0f} ms; "
                f"exploration {share}"
            )
    arm = c.get("trial_arm_s")
    trial = (
        ""
        if arm == 0
        else (", its launch-trial arm not measured" if arm is None else f", its trial arm {arm:.2f} s")
    )
    obs = c.get("observation_s")
    observed = (
        f", measured {obs:.2f} s against its runs without a window"
        if obs is not None and c.get("windows")
        else ""
    )
    exit_ms = c.get("exit_ms")
    report = "" if exit_ms is None else f"; its exit report {exit_ms:.0f} ms"
    cpu = c.get("gitmd_cpu_s")
    host = c.get("host_busy")
    cpus = (
        ""
        if cpu is None
        else f"; gitmd used {cpu:.2f} CPU-s while it ran"
        + ("" if host is None else f", the host's CPUs {100 * host:.0f}% busy")
    )
    return (
        f"{share}: {c.get('windows', 0)} windows ({c.get('window_s', 0):.1f} s, "
        f"{c.get('capture_model_s', 0):.2f} s by gitmd's capture model, "
        f"{c.get('attached_model_s', 0):.2f} s more with CUPTI left attached{observed}), losing trial arms "
        f"{c.get('losing_arms_s', 0):.2f} s{trial}{report}{cpus}"
    )
