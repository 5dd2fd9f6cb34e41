"""`gitmctl explain JOB` (through gitmd: the job's latest window) or `gitmctl explain --capture FILE`
(offline): where the window's time went per process — a bar per class, the step, the top kernels,
pageable copies and what pinned memory would save. Causes and the levers they point to come with
the attribution work."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "explain"
BAR = 40
LABELS = {
    "kernels": "GPU: kernels",
    "copies": "GPU: copies",
    "launch_gaps": "idle: launch gaps",
    "sync_stall": "idle: after syncs",
    "allocator": "idle: after alloc/free",
}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="where a job's (or a capture file's) window time went")
    p.add_argument("job", nargs="?", help="job id or name (its latest capture window)")
    p.add_argument(
        "--capture", type=Path, help="explain a capture file instead (gitmctl trace --raw); offline"
    )
    p.add_argument("--top", type=int, default=8, help="kernels to list (capture files)")


def offline(args: argparse.Namespace) -> int:
    from gitmd.analysis.report import window_report
    from gitmd.api.convert import attribution_to_pb
    from gitmd.capture import capture_file

    try:
        report = attribution_to_pb(window_report(capture_file.loads(args.capture), args.top))
    except (OSError, capture_file.CaptureFileError) as e:
        print(f"gitmctl explain: {args.capture}: {e}", file=sys.stderr)
        return 2
    return show(args, report, f"capture {args.capture}")


def run(args: argparse.Namespace, client: Client) -> int:
    if not args.job:
        print("gitmctl explain: give a job id or name, or --capture FILE", file=sys.stderr)
        return 2
    report = client.call(client.stub.GetAttribution, pb.GetAttributionRequest(job_id=args.job))
    return show(args, report, f"job {report.job_id}")


def show(args: argparse.Namespace, a: Any, what: str) -> int:
    if args.json:
        render.print_json(a)
        return 0
    print(f"{what}: window {a.window_id}")
    for p in a.processes:
        print(f"\npid {p.pid}, {p.window_ms:.2f} ms of records")
        for c in p.classes:
            bar = "#" * round(c.share * BAR)
            print(f"  {LABELS.get(c.name, c.name):<24} {bar:<{BAR}} {100 * c.share:5.1f}%")
        st = p.step
        if st.found:
            print(
                f"  step: {st.median_ms:.3f} ms median (p10 {st.p10_ms:.3f}, p90 {st.p90_ms:.3f}), "
                f"{st.steps} steps of {st.period_kernels} kernels, confidence {st.confidence:.2f}"
            )
        else:
            print(f"  step: none found ({st.reason})")
        if p.pageable_copies:
            print(
                f"  pageable copies: {p.pageable_copies}, {render.bytes_h(p.pageable_bytes)} in "
                f"{p.pageable_ms:.3f} ms; at pinned bandwidth ({p.pinned_gb_per_s:.1f} GB/s) "
                f"{p.pageable_saving_ms:.3f} ms less"
            )
        if p.allocations or p.frees:
            print(f"  allocator: {p.allocations} allocations, {p.frees} frees")
        if p.top_kernels:
            render.table(
                ("  KERNEL", "COUNT", "TOTAL ms", "SHARE"),
                [
                    ("  " + k.name[:80], str(k.count), f"{k.total_ms:.3f}", f"{100 * k.share:.1f}%")
                    for k in p.top_kernels
                ],
            )
    if not a.processes:
        print("no kernels or copies in the window")
    for note in a.notes:
        print(f"note: {note}")
    return 0
