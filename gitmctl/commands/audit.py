"""`gitmctl audit`: the append-only record of who did what (readers; newest first)."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "audit"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="who did what: registrations, changes, refusals")
    p.add_argument("--limit", type=int, default=50, help="entries to show (default 50, at most 10000)")
    p.add_argument("--target", default="", help="only entries about this job or policy id")
    p.add_argument("--slurm-job", dest="scheduler_job_id", default="", help="only this scheduler job id")
    p.add_argument("--before", type=int, default=0, help="only entries older than this id (paging)")


def run(args: argparse.Namespace, client: Client) -> int:
    if not 1 <= args.limit <= 10_000:
        raise SystemExit("gitmctl audit: --limit must be 1..10000")
    resp = client.call(
        client.stub.ListAudit,
        pb.ListAuditRequest(
            limit=args.limit,
            target=args.target,
            scheduler_job_id=args.scheduler_job_id,
            before_id=args.before,
        ),
    )
    if args.json:
        render.print_json(resp)
        return 0
    rows = [
        (
            str(e.id),
            render.clock_h(e.at_unix_ns),
            e.actor,
            e.action,
            e.target or "-",
            e.outcome,
            e.detail[:80],
        )
        for e in resp.entries
    ]
    render.table(("ID", "WHEN", "WHO", "ACTION", "TARGET", "OUTCOME", "DETAIL"), rows)
    return 0
