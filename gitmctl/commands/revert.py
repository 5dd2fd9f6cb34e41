"""`gitmctl revert ID`: take an intervention back (promoted ones too), to the state it found."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "revert"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="revert an intervention (see `gitmctl interventions`)")
    p.add_argument("intervention", type=int, help="intervention id")


def run(args: argparse.Namespace, client: Client) -> int:
    iv = client.call(
        client.stub.RevertIntervention, pb.RevertInterventionRequest(intervention_id=args.intervention)
    )
    if args.json:
        render.print_json(iv)
        return 0
    print(f"intervention {iv.id} ({iv.lever} on job {iv.job_id}): {iv.state} — {iv.reason}")
    return 0
