"""`gitmctl jobs` and `gitmctl job ID`: registered jobs, their processes and what the shim says."""

from __future__ import annotations

import argparse
import shlex

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "jobs"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="list jobs (running; --all for every job)")
    p.add_argument("--all", action="store_true", help="include jobs that have exited")


def run(args: argparse.Namespace, client: Client) -> int:
    resp = client.call(client.stub.ListJobs, pb.ListJobsRequest(all=args.all))
    if args.json:
        render.print_json(resp)
        return 0
    rows = [
        (
            j.id,
            j.name,
            j.state + (f" ({j.exit_code})" if j.HasField("exit_code") else ""),
            str(sum(p.alive for p in j.processes)),
            "on" if j.capture else "off",
            str(j.windows),
            render.clock_h(j.created_unix_ns),
            shlex.join(j.command)[:60],
        )
        for j in resp.jobs
    ]
    render.table(("ID", "NAME", "STATE", "PROCS", "CAPTURE", "WINDOWS", "CREATED", "COMMAND"), rows)
    if resp.untracked:
        print(f"\n{len(resp.untracked)} GPU process(es) not launched through gitmd:")
        for u in resp.untracked:
            mem = render.bytes_h(u.used_memory_bytes) if u.HasField("used_memory_bytes") else "?"
            print(
                f"  pid {u.pid} ({u.name or '?'}, user {u.user or '?'}) on GPU {u.gpu_index}, {mem}: "
                f"{u.reason}"
            )
            if u.relaunch:
                print(f"    relaunch: {u.relaunch}")
    return 0
