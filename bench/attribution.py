"""Attribution validation on the planted-cause captures (tests/fixtures/planted, real H200 windows
taken by bench/capture_set.py; each judged against the window before it, as gitmd does live), plus
a planted throttling episode on simulated telemetry (throttling cannot be induced on the H200: its
clocks and power are never changed). Prints the confusion table of planted cause against the top
cause found, and what else came out above threshold; exit 1 unless every planted cause is the top
cause and the control shows none. Also times the analysis of one window of >= 1 M records.

    python bench/attribution.py [--fixtures DIR] [--json FILE] [--speed-records N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.analysis.report import WindowReport, busiest, history_of, window_report  # noqa: E402
from gitmd.capture import capture_file  # noqa: E402
from gitmd.capture.context import GPU_DTYPE, ContextSampler  # noqa: E402
from gitmd.capture.decode import Decoded  # noqa: E402
from gitmd.capture.windows import WindowResult  # noqa: E402
from gitmd.config import SimConfig, ThrottleEpisode  # noqa: E402
from gitmd.telemetry.sim import SimBackend  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "planted"


def with_sim_throttling(
    w: WindowResult, reason: str = "hw_thermal_slowdown", factor: float = 0.6
) -> WindowResult:
    """The window with its GPU series replaced by the simulated backend's, which plays a throttling
    episode over the middle half of the window, read at the real samples' times."""
    t = w.context.host["t_ns"].astype(np.int64)
    t0 = int(t[0])
    span_s = (int(t[-1]) - t0) / 1e9
    now = {"ns": t0}
    cfg = SimConfig(
        gpus=1,
        throttle_episodes=(
            ThrottleEpisode(0, span_s / 4, span_s / 2, reason=reason, sm_clock_factor=factor),
        ),
    )
    sim = SimBackend(cfg, monotonic_s=lambda: (now["ns"] - t0) / 1e9, clock_ns=lambda: now["ns"])
    sim.open()
    main = busiest(w)
    sampler = ContextSampler(sim)
    sampler.prepare([main.pid] if main else [], gpus=(0,), now_ns=t0)
    rows = []
    for ts in t.tolist():
        now["ns"] = ts
        rows.append(sampler.gpu_row(ts, 0))
    ctx = dataclasses.replace(w.context, gpus=(0,), gpu=np.array(rows, dtype=GPU_DTYPE))
    return dataclasses.replace(w, context=ctx)


def top(rep: WindowReport) -> tuple[str, list[str]]:
    above = [c for c in rep.causes if c.above_threshold]
    return (above[0].name if above else "none"), [f"{c.name} {100 * c.share:.1f}%" for c in above]


def validate(folder: Path) -> list[dict[str, object]]:
    rows = []
    cases = json.loads((folder / "manifest.json").read_text())
    for case in cases:
        hist = capture_file.loads(folder / case["history"])
        w = capture_file.loads(folder / case["window"])
        rep = window_report(w, history=history_of([hist]))
        found, above = top(rep)
        rows.append(
            {
                "case": case["case"],
                "planted": case["cause"],
                "top": found,
                "above": above,
                "tests": sum(t.significant for t in rep.tests),
                "source": "H200",
            }
        )
    control = next(c for c in cases if c["cause"] == "none")
    hist = with_sim_throttling(capture_file.loads(folder / control["history"]), factor=1.0)
    w = with_sim_throttling(capture_file.loads(folder / control["window"]))
    rep = window_report(w, history=history_of([hist]))
    found, above = top(rep)
    rows.append(
        {
            "case": f"{control['case']} + simulated thermal slowdown",
            "planted": "throttling",
            "top": found,
            "above": above,
            "tests": sum(t.significant for t in rep.tests),
            "source": "H200 kernels, simulated GPU telemetry",
        }
    )
    return rows


def big_window(folder: Path, records: int) -> WindowResult:
    """A window of >= ``records`` records: the launch-bound capture's busiest process tiled in time."""
    w = capture_file.loads(folder / "launch-1k.w2.npz")
    main = busiest(w)
    assert main is not None
    r = main.records
    span = int(r.kernels["end_ns"].max() - r.kernels["start_ns"].min()) + 1000
    reps = -(-records // max(1, r.count))
    parts = {}
    for kind in ("kernels", "memcpys", "memsets", "syncs", "memory"):
        a = getattr(r, kind)
        tiles = []
        for i in range(reps):
            t = a.copy()
            t["start_ns"] += i * span
            t["end_ns"] += i * span
            tiles.append(t)
        parts[kind] = np.concatenate(tiles)
    big = dataclasses.replace(r, **parts)
    assert isinstance(big, Decoded)
    return dataclasses.replace(w, processes=[dataclasses.replace(main, records=big)])


def speed(folder: Path, records: int) -> dict[str, float]:
    w = big_window(folder, records)
    n = sum(p.records.count for p in w.processes)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        window_report(w)
        best = min(best, time.perf_counter() - t0)
    return {"records": n, "seconds": best}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", type=Path, default=FIXTURES)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--speed-records", type=int, default=1_000_000, help="0: skip the timing")
    a = ap.parse_args()
    rows = validate(a.fixtures)
    causes = sorted({str(r["planted"]) for r in rows} | {str(r["top"]) for r in rows})
    print("| planted \\ top cause | " + " | ".join(causes) + " |")
    print("|---" * (len(causes) + 1) + "|")
    for planted in sorted({str(r["planted"]) for r in rows}):
        counts = [sum(1 for r in rows if r["planted"] == planted and r["top"] == c) for c in causes]
        print(f"| {planted} | " + " | ".join(str(c) if c else "." for c in counts) + " |")
    print()
    print("| case | planted | top cause | above threshold | significant Granger tests | data |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        above = ", ".join(r["above"]) or "-"  # type: ignore[arg-type]
        print(f"| {r['case']} | {r['planted']} | {r['top']} | {above} | {r['tests']} | {r['source']} |")
    ok = all(r["top"] == r["planted"] for r in rows)
    out: dict[str, object] = {"cases": rows, "all_correct": ok}
    if a.speed_records:
        s = speed(a.fixtures, a.speed_records)
        out["speed"] = s
        print(f"\nanalysis of one window of {s['records']:,} records: {s['seconds']:.2f} s (target <= 2 s)")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    print("\nall planted causes found, control clean" if ok else "\nMISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
