"""`gitmctl interventions [JOB]`: what gitmd changed on jobs, and whether it was kept."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "interventions"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="changes gitmd made to jobs: applied, promoted, reverted")
    p.add_argument("job", nargs="?", default="", help="one job (id or name); default: every job you may see")
    p.add_argument("--pending", action="store_true", help="only those not yet promoted or reverted")


def run(args: argparse.Namespace, client: Client) -> int:
    resp = client.call(
        client.stub.ListInterventions, pb.ListInterventionsRequest(job_id=args.job, pending_only=args.pending)
    )
    if args.json:
        render.print_json(resp)
        return 0
    render.table(
        ("ID", "JOB", "LEVER", "SETTING", "STATE", "EXPERIMENT", "WHEN", "REASON"),
        [
            (
                str(iv.id),
                iv.job_id,
                iv.lever,
                iv.setting_json,
                iv.state,
                str(iv.experiment_id or "-"),
                render.clock_h(iv.updated_unix_ns),
                iv.reason[:60] or "-",
            )
            for iv in resp.interventions
        ],
    )
    return 0
