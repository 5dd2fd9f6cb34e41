"""`gitmctl telemetry`: the latest sample per GPU, a stored time range, or a live stream (--watch)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "telemetry"
HEADERS = (
    "GPU",
    "TIME",
    "UTIL%",
    "MEM%",
    "SM MHz",
    "MEM MHz",
    "POWER W",
    "TEMP C",
    "MEM USED",
    "PCIe RX MB/s",
    "PCIe TX MB/s",
    "CLOCK EVENTS",
    "PROCS",
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 5m, 2h, 1d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="GPU telemetry: latest, a time range, or --watch")
    p.add_argument("--gpu", type=int, metavar="N", help="only GPU N")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--watch", action="store_true", help="stream every new sample until interrupted")
    mode.add_argument(
        "--since",
        type=parse_duration,
        metavar="DURATION",
        help="stored samples of the last DURATION (e.g. 30s, 5m, 2h)",
    )
    p.add_argument(
        "--limit", type=int, default=0, help="at most this many samples with --since (newest kept)"
    )


def row(s: Any) -> tuple[str, ...]:
    reasons = ",".join(s.clock_event_reasons) or "-"
    used = render.bytes_h(s.memory_used_bytes) if s.HasField("memory_used_bytes") else "-"
    return (
        str(s.gpu_index) + ("*" if s.downsampled else ""),
        render.clock_h(s.ts_unix_ns),
        render.opt(s, "utilization_gpu_pct"),
        render.opt(s, "utilization_memory_pct"),
        render.opt(s, "sm_clock_mhz"),
        render.opt(s, "mem_clock_mhz"),
        render.opt(s, "power_mw", "{:.1f}", 1e-3),
        render.opt(s, "temperature_c"),
        used,
        render.opt(s, "pcie_rx_bytes_per_s", "{:.1f}", 1e-6),
        render.opt(s, "pcie_tx_bytes_per_s", "{:.1f}", 1e-6),
        reasons,
        str(len(s.processes)),
    )


def _request_gpu(args: argparse.Namespace) -> dict[str, int]:
    return {} if args.gpu is None else {"gpu_index": args.gpu}


def run(args: argparse.Namespace, client: Client) -> int:
    if args.gpu is not None and args.gpu < 0:
        print("gitmctl: --gpu must be 0 or more", file=sys.stderr)
        return 2
    if args.watch:
        return _watch(args, client)
    if args.since is not None:
        now = time.time_ns()
        req = pb.GetTelemetryRequest(
            since_unix_ns=now - int(args.since * 1e9),
            until_unix_ns=now,
            limit=max(args.limit, 0),
            **_request_gpu(args),
        )
    else:
        req = pb.GetTelemetryRequest(**_request_gpu(args))
    resp = client.call(client.stub.GetTelemetry, req)
    if args.json:
        render.print_json(resp)
        return 0
    render.table(HEADERS, [row(s) for s in resp.samples])
    for s in resp.samples if args.since is None else []:
        for p in s.processes:
            mem = render.bytes_h(p.used_memory_bytes) if p.HasField("used_memory_bytes") else "?"
            print(f"  GPU {s.gpu_index}: pid {p.pid} {p.name or '?'} using {mem}")
        for e in s.errors:
            print(f"  GPU {s.gpu_index}: could not read {e.field}: {e.message}")
    if resp.truncated:
        print("(more samples matched; the newest are shown — use --limit)")
    if any(s.downsampled for s in resp.samples):
        print("* per-minute aggregate (older than the full-rate retention)")
    return 0


_WATCH_WIDTHS = (4, 12, 5, 4, 6, 7, 7, 6, 10, 12, 12, 24, 5)


def _fixed(cells: tuple[str, ...]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, _WATCH_WIDTHS, strict=True)).rstrip()


def _watch(args: argparse.Namespace, client: Client) -> int:
    stream = client.stream(client.stub.WatchTelemetry, pb.WatchTelemetryRequest(**_request_gpu(args)))
    printed = 0
    try:
        for s in stream:
            if args.json:
                render.print_json(s, compact=True)
                continue
            if printed % 20 == 0:
                print(_fixed(HEADERS))
            print(_fixed(row(s)), flush=True)
            printed += 1
    except KeyboardInterrupt:
        return 0
    return 0
