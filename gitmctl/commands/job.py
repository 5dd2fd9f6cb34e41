"""`gitmctl job ID`: one job in detail."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "job"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="one job in detail")
    p.add_argument("job", help="job id or name")


def run(args: argparse.Namespace, client: Client) -> int:
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
            ("command", shlex.join(j.command)),
            ("cwd", j.cwd or "-"),
            ("capture", ("on, " + j.runtime_dir) if j.capture else "off"),
            ("windows", str(j.windows)),
            ("user", f"{j.user} ({j.uid})"),
            ("gpus", ",".join(map(str, j.gpus)) or "-"),
            ("scheduler job", j.scheduler_job_id or "-"),
            ("exploration", "allowed" if j.allow_exploration else "off (known-good policies only)"),
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
        render.table(
            ("PID", "ALIVE", "SHIM", "RECORDS", "DROPS RING/CUPTI", "REASON"),
            [
                (
                    str(p.pid),
                    "yes" if p.alive else "no",
                    p.status,
                    str(p.records_written),
                    f"{p.ring_drops}/{p.cupti_drops}",
                    p.reason,
                )
                for p in j.processes
            ],
        )
    return 0


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
