#!/usr/bin/env python3
"""What more hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, the lever cuda_device_max_connections)
could reach in the capture windows committed under bench/results/, beside what that lever's launch
trials and oracles measured there. CPU only: it reads the raw archives (windows-<program>.tgz,
corpus-<program>.json, oracle-<program>.json), runs nothing.

    python3 bench/queue_reach.py [--results bench/results] [--json OUT.json]

Per window, the launch_bound cause's share (gitmd's attribution), the streams its work ran on, and
two bounds on what more queues could overlap, each a share of the window: with copies and memsets
counted as stream work, and kernels only (gitmd.analysis.causes.queue_reach_ns, what gitmd uses).
Then every launch trial of the lever in the corpus files (its A and B arms' CUDA seconds) and every
oracle measurement of it (plain over lever on the program's own clock). Nothing is estimated: a
figure a file does not hold is not printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.analysis import causes  # noqa: E402
from gitmd.analysis.report import analysed, window_report  # noqa: E402
from gitmd.capture import capture_file  # noqa: E402
from gitmd.records import Decoded  # noqa: E402


def with_copies_ns(r: Decoded) -> float:
    """queue_reach_ns with copies and memsets counted as their streams' work too: the stream work
    of the window's kernels, copies and memsets as one record set for the one computation."""
    parts = [a for a in (r.kernels, r.memcpys, r.memsets) if len(a)]
    if not parts:
        return 0.0
    cols = ("device", "stream_id", "start_ns", "end_ns")
    work = np.zeros(sum(len(x) for x in parts), dtype=[(c, np.int64) for c in cols])
    for c in cols:
        work[c] = np.concatenate([x[c] for x in parts])
    return causes.queue_reach_ns(dataclasses.replace(r, kernels=work))


def windows(results: Path) -> list[dict[str, Any]]:
    """One row per window: the process its causes are about (WindowReport.cause_pid), over the
    records its breakdown covers (report.analysed), as gitmd attributes it."""
    rows = []
    for tgz in sorted(results.rglob("windows-*.tgz")):
        program = tgz.name[len("windows-") : -len(".tgz")]
        with tarfile.open(tgz) as tar:
            for m in tar.getmembers():
                f = tar.extractfile(m) if m.name.endswith(".npz") else None
                if f is None:
                    continue
                w = capture_file.loads(f.read())
                rep = window_report(w)
                lb = next((c for c in rep.causes if c.name == "launch_bound"), None)
                main = next((p for p in w.processes if p.pid == rep.cause_pid), None)
                if lb is None or main is None:
                    continue
                _, b, r = analysed(main.records.timed())
                span = float(b.window_ns)
                rows.append({
                    "archive": str(tgz.relative_to(results)), "window": m.name, "program": program,
                    "launch_bound": round(lb.share, 4), "streams": causes.busy_streams(r),
                    "with_copies": round(with_copies_ns(r) / span, 4) if span else None,
                    "kernels_only": round(lb.bound(causes.MORE_QUEUES), 4),  # gitmd's own (Cause.bounds)
                    "offered_now": causes.MORE_QUEUES in lb.levers,
                })  # fmt: skip
    return rows


def measured(results: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    trials, oracles = [], []
    for f in sorted(results.rglob("*.json")):
        if not (f.name.startswith("corpus-") or f.name.startswith("oracle-")) or "summary" in f.name:
            continue
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict):
            continue
        for t in d.get("library") or []:
            if isinstance(t, dict) and t.get("lever") == causes.MORE_QUEUES:
                arms = {r["arm"]: r.get("run_s") for r in t.get("runs", [])}
                trials.append({"file": str(f.relative_to(results)), "program": d.get("program"),
                               "half": d.get("half"), "A_run_s": arms.get("A"), "B_run_s": arms.get("B"),
                               "state": t.get("state")})  # fmt: skip
        o = d.get("oracle") if f.name.startswith("corpus-") else d
        lv = ((o or {}).get("levers") or {}).get(causes.MORE_QUEUES) or {}
        if lv.get("ratios"):
            oracles.append({"file": str(f.relative_to(results)), "program": d.get("program"),
                            "speedup": lv.get("speedup"), "interval": lv.get("interval"),
                            "pairs": len(lv["ratios"])})  # fmt: skip
    return trials, oracles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    rows = windows(a.results)
    trials, oracles = measured(a.results)
    print(
        "| program | archive / window | launch_bound | streams | with copies | kernels only | offered now |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        offered = "yes" if r["offered_now"] else "no"
        print(f"| {r['program']} | {r['archive']} {r['window']} | {r['launch_bound']} | {r['streams']} | "
              f"{r['with_copies']} | {r['kernels_only']} | {offered} |")  # fmt: skip
    print("\nlaunch trials of cuda_device_max_connections (CUDA s of each arm's run)")
    print("| program | half | A run_s | B run_s | B/A | file |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in trials:
        ratio = f"{t['B_run_s'] / t['A_run_s']:.3f}" if t["A_run_s"] and t["B_run_s"] else "not measured"
        print(f"| {t['program']} | {t['half']} | {t['A_run_s'] or 'not measured'} | "
              f"{t['B_run_s'] or 'not measured'} | {ratio} | {t['file']} |")  # fmt: skip
    print("\noracle measurements of cuda_device_max_connections (plain / lever, program's clock)")
    print("| program | speedup | interval | pairs | file |")
    print("| --- | --- | --- | --- | --- |")
    for o in oracles:
        print(f"| {o['program']} | {o['speedup']} | {o['interval']} | {o['pairs']} | {o['file']} |")
    if a.json:
        a.json.write_text(json.dumps({"windows": rows, "trials": trials, "oracles": oracles}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
