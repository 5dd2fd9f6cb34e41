"""`gitmctl explain --capture FILE`: where a captured window's time went, per process — a bar per
class, the step, the top kernels, and what pinned memory would save. Offline: no daemon needed.
(Explaining a live job through the daemon, with causes and the levers they point to, is the
attribution work still to come.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gitmctl import render
from gitmd.analysis.breakdown import breakdown
from gitmd.analysis.steps import detect
from gitmd.capture import capture_file

NAME = "explain"
BAR = 40


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="where a captured window's time went (--capture FILE)")
    p.add_argument("--capture", type=Path, required=True, help="a capture file (gitmctl trace --raw)")
    p.add_argument("--top", type=int, default=8, help="kernels to list")


def _top_kernels(r: Any, n: int) -> list[dict[str, Any]]:
    k = r.kernels
    if not len(k):
        return []
    dur = (k["end_ns"].astype(np.int64) - k["start_ns"].astype(np.int64)).astype(np.float64)
    ids, inverse = np.unique(k["name_id"], return_inverse=True)
    totals = np.bincount(inverse, weights=dur)
    counts = np.bincount(inverse)
    order = np.argsort(-totals)[:n]
    total = float(dur.sum()) or 1.0
    return [
        {
            "name": r.names.get(int(ids[i]), f"kernel#{int(ids[i])}"),
            "count": int(counts[i]),
            "total_ms": float(totals[i]) / 1e6,
            "share": float(totals[i]) / total,
        }
        for i in order
    ]


def analyse(path: Path, top: int) -> dict[str, Any]:
    w = capture_file.loads(path)
    procs = []
    for p in w.processes:
        r = p.records
        if not (len(r.kernels) or len(r.memcpys)):
            continue
        b = breakdown(r)
        st = detect(r.kernels["name_id"], r.kernels["start_ns"])
        procs.append(
            {
                "pid": p.pid,
                "window_ms": b.window_ns / 1e6,
                "shares": b.shares(),
                "pageable": {
                    "copies": b.pageable_copies,
                    "bytes": b.pageable_bytes,
                    "ms": b.pageable_ns / 1e6,
                    "saving_ms": b.pageable_saving_ns / 1e6,
                    "pinned_gb_per_s": b.pinned_bytes_per_s / 1e9,
                },
                "allocator": {"allocs": b.alloc_count, "frees": b.free_count},
                "syncs": b.sync_count,
                "step": {
                    "found": st.found,
                    "reason": st.reason,
                    "period_kernels": st.period_kernels,
                    "steps": st.steps,
                    "median_ms": st.median_ns / 1e6,
                    "p10_ms": st.p10_ns / 1e6,
                    "p90_ms": st.p90_ns / 1e6,
                    "confidence": st.confidence,
                },
                "top_kernels": _top_kernels(r, top),
            }
        )
    return {
        "capture": str(path),
        "job_id": w.job_id,
        "window_id": w.window_id,
        "processes": procs,
        "notes": w.notes,
    }


LABELS = (
    ("kernels", "GPU: kernels"),
    ("copies", "GPU: copies"),
    ("launch_gaps", "idle: launch gaps"),
    ("sync_stall", "idle: after syncs"),
    ("allocator", "idle: after alloc/free"),
)


def run_offline(args: argparse.Namespace) -> int:
    try:
        report = analyse(args.capture, args.top)
    except (OSError, capture_file.CaptureFileError) as e:
        print(f"gitmctl explain: {args.capture}: {e}", file=sys.stderr)
        return 2
    if args.json:
        render.print_json(report)
        return 0
    print(f"capture {report['capture']}: job {report['job_id']}, window {report['window_id']}")
    for p in report["processes"]:
        print(f"\npid {p['pid']}, {p['window_ms']:.2f} ms of records")
        for key, label in LABELS:
            share = p["shares"][key]
            print(f"  {label:<24} {'#' * round(share * BAR):<{BAR}} {100 * share:5.1f}%")
        st = p["step"]
        if st["found"]:
            print(
                f"  step: {st['median_ms']:.3f} ms median (p10 {st['p10_ms']:.3f}, p90 {st['p90_ms']:.3f}), "
                f"{st['steps']} steps of {st['period_kernels']} kernels, confidence {st['confidence']:.2f}"
            )
        else:
            print(f"  step: none found ({st['reason']})")
        pg = p["pageable"]
        if pg["copies"]:
            print(
                f"  pageable copies: {pg['copies']}, {render.bytes_h(pg['bytes'])} in {pg['ms']:.3f} ms; "
                f"at pinned bandwidth ({pg['pinned_gb_per_s']:.1f} GB/s) {pg['saving_ms']:.3f} ms less"
            )
        if p["allocator"]["allocs"] or p["allocator"]["frees"]:
            print(f"  allocator: {p['allocator']['allocs']} allocations, {p['allocator']['frees']} frees")
        if p["top_kernels"]:
            render.table(
                ("  KERNEL", "COUNT", "TOTAL ms", "SHARE"),
                [
                    (
                        "  " + k["name"][:80],
                        str(k["count"]),
                        f"{k['total_ms']:.3f}",
                        f"{100 * k['share']:.1f}%",
                    )
                    for k in p["top_kernels"]
                ],
            )
    for note in report["notes"]:
        print(f"note: {note}")
    return 0
