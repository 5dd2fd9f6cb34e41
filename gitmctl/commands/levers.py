"""`gitmctl levers [NAME...]`: the lever catalog — every change gitmd may try on a job, its kind and
risk, what it changes, and the causes (of `gitmctl explain`) that select it; with names, each one
in full: what it does, its default setting and the environment it adds to a launch."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gitmctl import render
from gitmctl.client import EXIT_NOT_FOUND, Client, pb

NAME = "levers"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="the levers gitmd may try: what each changes, and why")
    p.add_argument("names", nargs="*", metavar="NAME", help="show these levers in full")


def launch_env(lever: Any) -> str:
    """The variables a launch lever's default setting sets (gitmd's own GITM_* paths left out)."""
    return " ".join(f"{v}={lever.env[v]}" for v in lever.variables if v in lever.env)


def run(args: argparse.Namespace, client: Client) -> int:
    resp = client.call(client.stub.ListLevers, pb.ListLeversRequest())
    levers = list(resp.levers)
    if args.names:
        by_name = {lv.name: lv for lv in levers}
        unknown = [n for n in args.names if n not in by_name]
        if unknown:
            print(
                f"gitmctl levers: no lever {', '.join(unknown)} (known: {', '.join(sorted(by_name))})",
                file=sys.stderr,
            )
            return EXIT_NOT_FOUND
        levers = [by_name[n] for n in args.names]
    if args.json:
        render.print_json(pb.ListLeversResponse(levers=levers))
        return 0
    if args.names:
        for i, lv in enumerate(levers):
            print(("\n" if i else "") + detail(lv))
        return 0
    render.table(
        ("LEVER", "KIND", "RISK", "CAUSES", "CHANGES"),
        [
            (
                lv.name,
                lv.kind,
                lv.risk,
                ",".join(lv.causes) or "-",
                f"env {launch_env(lv)}" if lv.launch and lv.variables else lv.changes,
            )
            for lv in levers
        ],
    )
    return 0


def detail(lv: Any) -> str:
    when = " and ".join(w for w, on in (("at launch", lv.launch), ("live", lv.live)) if on)
    lines = [
        f"{lv.name}: {lv.kind}, {lv.risk}{', host threads only' if lv.host_only else ''} ({when})",
        f"  {lv.summary}" if lv.summary else "",
        f"  changes: {lv.changes}",
        f"  selected by: {', '.join(lv.causes) or 'no cause (only when asked for)'}",
        f"  defaults: {lv.defaults_json}",
        f"  environment: {' '.join(f'{k}={v}' for k, v in sorted(lv.env.items()))}" if lv.env else "",
        f"  the same change {'live' if lv.launch else 'at launch'}: {lv.counterpart}"
        if lv.counterpart
        else "",
    ]
    return "\n".join(line for line in lines if line)
