"""The shim's cost on unmodified torch workloads, measured side by side in one run (GPU host).

Every probe process is pinned to the same CPUs (GITM_BENCH_CPUS, default 2,3), so that where the
scheduler happens to place a process does not pass for the shim's cost.

Conditions: (a) no shim; (b0) shim loaded, no window opened yet; (b) shim, windows closed after
some were open; (c) a window open (kernel, copy, memset, sync and memory activity on). (b) is
measured for both ways of closing a window: "detach" (cuptiFinalize after the window, the default)
and "disable" (cuptiActivityDisable only, GITM_SHIM_DETACH=0). Separate processes are needed for
(a) and each shim strategy, so the run rotates a plain, a detach and a disable process, REPEATS of
each; inside a shim process (b) and (c) alternate ABAB, the benchmark itself opening and closing
windows through the ring's control page as gitmd does. Figures are medians; the amortised cost at
a duty cycle of D s every P s is (D*c + (P-D)*b) / P against a — at the fixed --duty, and at the
period gitmd's duty cycle takes for the launch rate the windows saw (gitmd/capture/duty.py: the
period is stretched for launch-heavy jobs, with the daemon's default budget and per-launch cost).

    python bench/shim_overhead.py --repeats 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.capture import duty  # noqa: E402
from gitmd.capture.ring import Ring  # noqa: E402
from gitmd.capture.windows import KIND_BITS  # noqa: E402
from gitmd.config import CaptureConfig  # noqa: E402
from gitmd.experiments.decide import speedup_interval  # noqa: E402

KERNEL = 1  # GITM_REC_KERNEL
SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
FLOOR = ROOT / "shim" / "build" / "libcupti_floor.so"  # CUPTI alone: bench/cupti_floor.c
PROBE = ROOT / "bench" / "workloads" / "overhead_probe.py"
WORKLOADS = {"launch": ("launch", 20000, "µs/op"), "train": ("train", 60, "ms/step")}


class Probe:
    def __init__(self, kind: str, tmp: Path, window_mask: int) -> None:
        env = dict(os.environ)
        env.setdefault("GITM_BENCH_CPUS", "2,3")
        self.kind = kind
        self.window_mask = window_mask
        self.ring: Ring | None = None
        self.open_latency_ms: list[float] = []
        self.kernels_seen = 0  # kernel records the windows held, and how long they were open
        self.open_s = 0.0
        self._opened = 0.0
        self.floor_report: Path | None = None
        if kind == "floor":  # kernel activity switched on once, nothing of ours: CUPTI's own cost
            d = Path(tempfile.mkdtemp(dir=tmp))
            self.floor_report, self.floor_control = d / "records", d / "control"
            env.update(
                CUDA_INJECTION64_PATH=str(FLOOR),
                GITM_FLOOR_REPORT=str(self.floor_report),
                GITM_FLOOR_CONTROL=str(self.floor_control),
            )
        elif kind != "plain":
            d = Path(tempfile.mkdtemp(dir=tmp))
            env.update(GITM_JOB_DIR=str(d), CUDA_INJECTION64_PATH=str(SHIM), GITM_RING_RECORDS=str(1 << 20))
            env["GITM_SHIM_DETACH"] = "1" if kind == "detach" else "0"
            # the shim detaches only in a settled process (10 s old, a window with no new kernel): the
            # steady state is measured here without waiting those 10 s in every probe process
            env["GITM_SHIM_DETACH_MIN_AGE_MS"] = "0"
            self.dir = d
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.p.stdout is not None
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"probe did not start: {line!r}")
        if kind not in ("plain", "floor"):
            rings = list(self.dir.glob("ring-*.gitm"))
            if len(rings) != 1:
                raise RuntimeError(f"expected one ring in {self.dir}, found {rings}")
            self.ring = Ring(rings[0])

    def warm_window(self) -> None:
        """The first enable instruments the loaded modules: not part of the steady state. A second
        window sees no kernel it had not seen, so the shim detaches after it, as in a settled job."""
        for _ in range(2):
            self.window(True)
            self.run("launch", 2000)
            self.run("train", 5)
            self.window(False)

    def floor_on(self) -> None:
        """CUPTI alone: kernel activity on for the rest of the process (bench/cupti_floor.c), warmed
        up as a first window is."""
        self.floor_control.write_text("1")
        ack = self.floor_control.with_name("control.ack")
        deadline = time.monotonic() + 30
        while not ack.exists() or not ack.read_text().strip():
            if time.monotonic() > deadline:
                raise RuntimeError("the floor library did not switch kernel activity on")
            time.sleep(0.001)
        if ack.read_text().strip() != "0":
            raise RuntimeError(f"cuptiActivityEnable failed: {ack.read_text().strip()}")
        self.run("launch", 2000)
        self.run("train", 5)

    def run(self, cmd: str, n: int) -> float:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(f"{cmd} {n}\n")
        self.p.stdin.flush()
        return float(self.p.stdout.readline())

    def window(self, open_: bool) -> None:
        assert self.ring is not None
        t0 = time.monotonic()
        seq = self.ring.open_window(1, self.window_mask, 250, 600_000) if open_ else self.ring.close_window()
        deadline = t0 + 30
        while not self.ring.acked(seq):
            if time.monotonic() > deadline:
                raise RuntimeError("the shim did not acknowledge the window")
            time.sleep(0.001)
        if open_:
            self.open_latency_ms.append((time.monotonic() - t0) * 1e3)
            self._opened = time.monotonic()
        else:
            self.open_s += t0 - self._opened
        want = "capturing" if open_ else "idle"
        if self.ring.status().status != want:
            raise RuntimeError(f"shim status {self.ring.status()}")
        rows = self.ring.drain()
        if not open_ and len(rows):  # the record type is byte 8 of each record (gitm_shim.h)
            types = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), -1)[:, 8]
            self.kernels_seen += int((types == KERNEL).sum())

    def close(self) -> dict[str, float]:
        counts: dict[str, float] = {}
        if self.ring is not None:
            st = self.ring.status()
            counts = {
                "ring_drops": st.ring_drops,
                "cupti_drops": st.cupti_drops,
                "records": st.records_written,
                "detaches": st.detaches,
            }
            if self.open_latency_ms:
                counts["window_open_ms_median"] = statistics.median(self.open_latency_ms)
            self.ring.close()
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(60)
        if self.floor_report is not None and self.floor_report.exists():
            counts["floor_records"] = int(self.floor_report.read_text())
        return counts


CONDS = ("a", "b0", "b_detach", "c_detach", "b_disable", "c_disable", "b0_floor", "c_floor")


def ratio_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% bootstrap interval of median(b) / median(a), processes resampled (gitmd's own unpaired
    interval: its experiments' decisions use the same)."""
    iv = speedup_interval(b, a, paired=False)
    return iv.low, iv.high


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=4, help="processes of each kind")
    ap.add_argument("--inner", type=int, default=2, help="measurements per condition inside a process")
    ap.add_argument("--duty", default="2,30", help="window seconds, period seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--window-kinds",
        default="kernel,memcpy,memset,sync,memory",
        help="activity kinds a window turns on (compare kernel alone against all)",
    )
    ap.add_argument(
        "--kinds",
        default="plain,detach,disable",
        help="process kinds to rotate; 'floor': CUPTI alone with kernel activity on (libcupti_floor.so)",
    )
    ap.add_argument("--workloads", default="launch,train")
    args = ap.parse_args()
    window_mask = sum(KIND_BITS[k] for k in args.window_kinds.split(","))
    for w in list(WORKLOADS):
        if w not in args.workloads.split(","):
            del WORKLOADS[w]
    if len(os.sched_getaffinity(0)) < 4:
        os.environ.setdefault("GITM_BENCH_CPUS", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    for lib in (SHIM, FLOOR) if "floor" in args.kinds.split(",") else (SHIM,):
        if not lib.exists():
            raise SystemExit(f"{lib} is missing: make -C shim")
    tmp = Path(tempfile.mkdtemp(prefix="gitm-overhead-"))
    samples: dict[str, dict[str, list[float]]] = {w: {c: [] for c in CONDS} for w in WORKLOADS}
    extra: list[dict[str, float]] = []
    seen = {w: [0, 0.0] for w in WORKLOADS}  # kernels in windows, seconds open
    kinds = args.kinds.split(",")
    for rep in range(args.repeats):
        order = kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]
        for kind in order:
            probe = Probe(kind, tmp, window_mask)
            per: dict[str, dict[str, list[float]]] = {w: {c: [] for c in CONDS} for w in WORKLOADS}
            if kind == "plain":
                for _ in range(args.inner):
                    for w, (cmd, n, _) in WORKLOADS.items():
                        per[w]["a"].append(probe.run(cmd, n))
            elif kind == "floor":  # off, then on: CUPTI cannot be switched off again cleanly
                for cond in ("b0_floor", "c_floor"):
                    if cond == "c_floor":
                        probe.floor_on()
                    for _ in range(args.inner):
                        for w, (cmd, n, _) in WORKLOADS.items():
                            per[w][cond].append(probe.run(cmd, n))
            else:
                for _ in range(args.inner):
                    for w, (cmd, n, _) in WORKLOADS.items():
                        per[w]["b0"].append(probe.run(cmd, n))
                probe.warm_window()
                for _ in range(args.inner):
                    for w, (cmd, n, _) in WORKLOADS.items():
                        per[w][f"b_{kind}"].append(probe.run(cmd, n))
                        k0, s0 = probe.kernels_seen, probe.open_s
                        probe.window(True)
                        per[w][f"c_{kind}"].append(probe.run(cmd, n))
                        probe.window(False)
                        seen[w][0] += probe.kernels_seen - k0
                        seen[w][1] += probe.open_s - s0
            extra.append({"kind": kind, **probe.close()})
            for w in WORKLOADS:
                for cond, vals in per[w].items():
                    if vals:
                        samples[w][cond].append(statistics.median(vals))
            shown = ", ".join(
                f"{w} " + " ".join(f"{c}={statistics.median(v):.3f}" for c, v in per[w].items() if v)
                for w in WORKLOADS
            )
            print(f"repeat {rep + 1}/{args.repeats} {kind}: {shown}", flush=True)
    window_s, period_s = (float(x) for x in args.duty.split(","))
    result: dict[str, Any] = {}
    print(
        f"\nshim overhead, median of {args.repeats} processes per kind, {args.inner} runs per condition each"
    )
    print(
        "| workload | (a) no shim | (b0) shim, no window yet | (b) closed, detach | (c) open, detach "
        f"| (b) closed, disable | (c) open, disable | amortised {window_s:g} s/{period_s:g} s, detach "
        "| gitmd's period: launches/s, period, amortised |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cfg = CaptureConfig()
    for w, (_, n, unit) in WORKLOADS.items():
        m = {c: statistics.median(samples[w][c]) if samples[w][c] else float("nan") for c in CONDS}
        a = m["a"]
        amort = (window_s * m["c_detach"] + (period_s - window_s) * m["b_detach"]) / period_s
        rate = seen[w][0] / seen[w][1] if seen[w][1] else 0.0
        gp = duty.next_period(
            round(rate * window_s), window_s, period_s, cfg.overhead_budget, cfg.launch_cost_us
        )
        amort_g = (window_s * m["c_detach"] + (gp - window_s) * m["b_detach"]) / gp
        result[w] = {
            "median": m,
            "unit": unit,
            "n": n,
            "amortised_detach": amort,
            "launches_per_s_in_windows": rate,
            "gitmd_period_s": gp,
            "amortised_detach_gitmd_period": amort_g,
            "samples": samples[w],
        }

        def pct(v: float, a: float = a) -> str:
            return f"{v:.3f} ({100 * (v / a - 1):+.1f}%)"

        print(
            f"| {w} ({n}) | {a:.3f} {unit} | {pct(m['b0'])} | {pct(m['b_detach'])} | {pct(m['c_detach'])} | "
            f"{pct(m['b_disable'])} | {pct(m['c_disable'])} | {100 * (amort / a - 1):+.2f}% | "
            f"{rate:.0f}, {gp:.0f} s, {100 * (amort_g / a - 1):+.2f}% |"
        )
    # process-to-process spread dominates (the launch-bound loop: 7.4-10.7 us/op between plain
    # processes): a 95% bootstrap interval of median(b)/median(a) says what the repeats can show
    print()
    for w in WORKLOADS:
        a_s, b_s = samples[w]["a"], samples[w]["b_detach"]
        if len(a_s) >= 2 and len(b_s) >= 2:
            lo, hi = ratio_interval(a_s, b_s)
            result[w]["closed_detach_interval"] = [lo, hi]
            print(
                f"{w}: (b) closed, detach, over (a): 95% interval {100 * (lo - 1):+.2f}% .. "
                f"{100 * (hi - 1):+.2f}% ({len(a_s)} + {len(b_s)} processes)"
            )
    # Within a process (its own placement and clocks, the spread between processes gone): the open
    # window over the closed one, and CUPTI alone on over off — the floor no CUPTI capture goes below.
    # Paired per process, as gitmd's experiments pair their arms (geometric mean, t interval).
    for w in WORKLOADS:
        for label, on, off in (
            ("the shim, (c) open over (b) closed, detach", "c_detach", "b_detach"),
            ("CUPTI alone (kernel activity), on over off", "c_floor", "b0_floor"),
        ):
            slow, fast = samples[w][on], samples[w][off]
            if min(len(slow), len(fast)) < 2 or len(slow) != len(fast):
                continue
            iv = speedup_interval(slow, fast, paired=True)  # > 1: slower with it on
            result[w][f"within_{on}_over_{off}"] = {
                "ratios": [c / b for c, b in zip(slow, fast, strict=True)],
                "geomean": iv.speedup,
                "ci95": [iv.low, iv.high],
            }
            print(
                f"{w}: {label}, within each process: {100 * (iv.speedup - 1):+.1f}% "
                f"(95% {100 * (iv.low - 1):+.1f}% .. {100 * (iv.high - 1):+.1f}%, {len(slow)} processes)"
            )
    lat = [e["window_open_ms_median"] for e in extra if "window_open_ms_median" in e]
    if lat:
        print(f"window open, request to acknowledgement: median {statistics.median(lat):.1f} ms")
    result["processes"] = extra
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
