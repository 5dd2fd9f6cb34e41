"""`gitmctl status`: is gitmd up, what it runs on, how it is configured."""

from __future__ import annotations

import argparse
import time

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "status"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="daemon version, uptime, backend and configuration")
    p.add_argument("--config", action="store_true", help="print the effective configuration (TOML)")


def run(args: argparse.Namespace, client: Client) -> int:
    st = client.call(client.stub.GetStatus, pb.GetStatusRequest())
    if args.json:
        render.print_json(st)
        return 0
    rows = [
        ("version", st.version),
        ("pid", str(st.pid)),
        ("uptime", render.duration_h(st.uptime_s)),
        ("backend", st.backend),
        ("GPUs", str(st.gpu_count)),
        ("driver", st.driver_version or "-"),
        ("socket", st.socket_path),
        ("state", st.state_dir),
        (
            "sampling",
            f"every {st.sample_interval_s:g} s, {st.samples_taken} samples, "
            f"{st.sample_field_errors} field errors",
        ),
    ]
    if st.pause.paused:
        said = f": {st.pause.reason}" if st.pause.reason else ""
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.pause.since_unix_ns / 1e9))
        rows.insert(1, ("PAUSED", f"by {st.pause.by} since {since}{said} "
                                  "(no windows or trials; `gitmctl resume`)"))  # fmt: skip
    if args.config:  # a TOML file gitmd reads back unchanged, nothing else on stdout
        print(st.config_toml, end="")
        return 0
    render.table(("", ""), rows)
    return 0
