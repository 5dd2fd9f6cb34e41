"""`gitmctl trace JOB [--duration S] [-o FILE]`: open a capture window on a running job now and
write a Chrome/Perfetto trace (open it in ui.perfetto.dev)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gitmctl import render
from gitmctl.client import Client, pb
from gitmctl.commands import job

NAME = "trace"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="capture a window of a running job as a Perfetto trace")
    p.add_argument("job", help="job id or name")
    p.add_argument("--duration", type=float, default=2.0, help="window length in seconds (default 2)")
    p.add_argument(
        "-o", "--output", type=Path, help="output file (default gitm-trace-<job>-<window>.json or .npz)"
    )
    p.add_argument(
        "--raw", action="store_true", help="write a capture file (raw records, npz) instead of a trace"
    )


def run(args: argparse.Namespace, client: Client) -> int:
    if args.duration <= 0:
        print("gitmctl trace: --duration must be more than 0", file=sys.stderr)
        return 2
    client.timeout_s = max(client.timeout_s, args.duration + 60)
    print(f"gitmctl trace: capturing {args.duration:g} s of job {args.job} ...", file=sys.stderr, flush=True)
    data = bytearray()
    summary = None
    for chunk in client.stream(
        lambda req: client.stub.TraceJob(req, timeout=client.timeout_s),
        pb.TraceJobRequest(job_id=args.job, duration_s=args.duration, raw=args.raw),
    ):
        if chunk.HasField("summary"):
            summary = chunk.summary
        data += chunk.data
    if summary is None:
        print("gitmctl trace: gitmd ended the stream without a summary", file=sys.stderr)
        return 1
    suffix = "npz" if args.raw else "json"
    out = args.output or Path(f"gitm-trace-{summary.job_id}-{summary.window_id}.{suffix}")
    out.write_bytes(bytes(data))
    if args.json:
        d = render.to_dict(summary)
        d["output"] = str(out)
        render.print_json(d)
    else:
        render.table(
            ("", ""),
            [
                (
                    "output",
                    f"{out} ({render.bytes_h(len(data))})"
                    + ("" if args.raw else "; open it in ui.perfetto.dev"),
                ),
                ("job / window", f"{summary.job_id} / {summary.window_id} ({summary.window_s:.2f} s)"),
                ("processes", str(summary.processes)),
                ("kernels", str(summary.kernels)),
                ("copies / memsets", f"{summary.memcpys} / {summary.memsets}"),
                ("syncs / alloc+free", f"{summary.syncs} / {summary.memory_ops}"),
                ("dropped (ring / CUPTI)", f"{summary.ring_drops} / {summary.cupti_drops}"),
            ],
        )
    if summary.HasField("step") and not args.json:
        print(job.step_line(summary.step))
    for note in summary.notes:
        print(f"  note: {note}", file=sys.stderr)
    return 0
