"""`gitmctl whoami`: who gitmd takes you for (the uid the kernel reported) and your roles."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "whoami"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sub.add_parser(NAME, parents=[common], help="who gitmd takes you for, and your roles")


def run(args: argparse.Namespace, client: Client) -> int:
    me = client.call(client.stub.WhoAmI, pb.WhoAmIRequest())
    if args.json:
        render.print_json(me)
        return 0
    render.table(("", ""), [("caller", me.name), ("roles", ", ".join(me.roles) or "(own jobs only)")])
    return 0
