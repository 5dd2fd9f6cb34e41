"""`gitmctl pause` / `gitmctl resume`: gitmd stops (or starts again) taking capture windows and
starting trials on jobs; the policies it validated still apply at launch and stay in force. Like
`tuned-adm off`, for a maintenance window or an incident. Kept across gitmd restarts. Admin role."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "pause"
ALSO = ("resume",)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pause", parents=[common], help="no capture windows or trials from now on (policies still apply)"
    )
    p.add_argument("--reason", default="", help="why, shown by `gitmctl status` and kept in the audit")
    p.set_defaults(pause_to=True)
    r = sub.add_parser("resume", parents=[common], help="undo `gitmctl pause`")
    r.add_argument("--reason", default="", help="why, kept in the audit")
    r.set_defaults(pause_to=False)


def run(args: argparse.Namespace, client: Client) -> int:
    st = client.call(client.stub.SetPause, pb.SetPauseRequest(paused=args.pause_to, reason=args.reason))
    if args.json:
        render.print_json(st)
        return 0
    said = f" ({st.reason})" if st.reason else ""
    if st.paused:
        print(f"gitmd paused by {st.by}{said}: no capture windows or trials; policies still apply")
    else:
        print(f"gitmd resumed by {st.by}{said}")
    return 0
