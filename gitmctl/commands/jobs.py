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
    p.add_argument("--watch", action="store_true", help="stream job events (registered, running, window...)")


def _watch(args: argparse.Namespace, client: Client) -> int:
    try:
        for ev in client.stream(client.stub.WatchJobs, pb.WatchJobsRequest()):
            if args.json:
                render.print_json(ev, compact=True)
                continue
            j = ev.job
            extra = ""
            if ev.kind == "window" and j.HasField("step") and j.step.found:
                extra = f" step {j.step.median_ms:.3f} ms"
            elif ev.kind in ("exited", "lost") and j.HasField("exit_code"):
                extra = f" exit {j.exit_code}"
            print(f"{render.clock_h(ev.at_unix_ns)}  {ev.kind:<10} {j.id}  {j.name}{extra}", flush=True)
    except KeyboardInterrupt:
        return 0
    return 0


def run(args: argparse.Namespace, client: Client) -> int:
    if args.watch:
        return _watch(args, client)
    resp = client.call(client.stub.ListJobs, pb.ListJobsRequest(all=args.all))
    if args.json:
        render.print_json(resp)
        return 0
    rows = [
        (
            j.id,
            j.name + (" [background]" if j.background else ""),
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
