"""The shim's cost on unmodified torch workloads, measured side by side in one run (GPU host).

Every probe process is pinned to the same CPUs (GITM_BENCH_CPUS, default 2,3), so that where the
scheduler happens to place a process does not pass for the shim's cost.

Conditions: (a) no shim; (b) shim loaded, no window open (CUPTI activity off); (c) a window open
(kernel, copy, memset, sync and memory activity on). (a) and (b) need separate processes, so the
run alternates a no-shim and a shim process, REPEATS of each; inside a shim process (b) and (c)
alternate ABAB, the benchmark itself opening and closing windows through the ring's control page
as gitmd does. Each process warms up first, and one window is opened and closed before measuring
(the first enable instruments loaded modules). Figures are medians; the amortised cost at a duty
cycle of D s every P s is (D*c + (P-D)*b) / P against a.

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.capture.ring import Ring  # noqa: E402

SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
PROBE = ROOT / "bench" / "workloads" / "overhead_probe.py"
KINDS_ALL = 31
WORKLOADS = {"launch": ("launch", 20000, "µs/op"), "train": ("train", 60, "ms/step")}


class Probe:
    def __init__(self, shim: bool, tmp: Path) -> None:
        env = dict(os.environ)
        env.setdefault("GITM_BENCH_CPUS", "2,3")
        self.ring: Ring | None = None
        if shim:
            d = Path(tempfile.mkdtemp(dir=tmp))
            env.update(GITM_JOB_DIR=str(d), CUDA_INJECTION64_PATH=str(SHIM), GITM_RING_RECORDS=str(1 << 20))
            self.dir = d
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.p.stdout is not None
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"probe did not start: {line!r}")
        if shim:
            rings = list(self.dir.glob("ring-*.gitm"))
            if len(rings) != 1:
                raise RuntimeError(f"expected one ring in {self.dir}, found {rings}")
            self.ring = Ring(rings[0])
            self.window(True)  # warm-up window: the first enable instruments the loaded modules
            self.run("launch", 2000)
            self.run("train", 5)
            self.window(False)

    def run(self, cmd: str, n: int) -> float:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(f"{cmd} {n}\n")
        self.p.stdin.flush()
        return float(self.p.stdout.readline())

    def window(self, open_: bool) -> None:
        assert self.ring is not None
        seq = self.ring.open_window(1, KINDS_ALL, 250, 600_000) if open_ else self.ring.close_window()
        deadline = time.monotonic() + 10
        while not self.ring.acked(seq):
            if time.monotonic() > deadline:
                raise RuntimeError("the shim did not acknowledge the window")
            time.sleep(0.002)
        if self.ring.status().status not in ("capturing" if open_ else "idle",):
            raise RuntimeError(f"shim status {self.ring.status()}")
        self.ring.drain()

    def close(self) -> dict[str, int]:
        counts = {}
        if self.ring is not None:
            st = self.ring.status()
            counts = {
                "ring_drops": st.ring_drops,
                "cupti_drops": st.cupti_drops,
                "records": st.records_written,
            }
            self.ring.close()
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(60)
        return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="processes of each kind")
    ap.add_argument("--inner", type=int, default=3, help="measurements per condition inside a process")
    ap.add_argument("--duty", default="2,30", help="window seconds, period seconds")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 4:
        os.environ.setdefault("GITM_BENCH_CPUS", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    if not SHIM.exists():
        raise SystemExit(f"{SHIM} is missing: make -C shim")
    tmp = Path(tempfile.mkdtemp(prefix="gitm-overhead-"))
    samples: dict[str, dict[str, list[float]]] = {w: {"a": [], "b": [], "c": []} for w in WORKLOADS}
    drops = []
    for rep in range(args.repeats):
        for shim in (False, True) if rep % 2 == 0 else (True, False):
            probe = Probe(shim, tmp)
            per: dict[str, dict[str, list[float]]] = {w: {"a": [], "b": [], "c": []} for w in WORKLOADS}
            for _ in range(args.inner):
                for w, (cmd, n, _) in WORKLOADS.items():
                    if not shim:
                        per[w]["a"].append(probe.run(cmd, n))
                        continue
                    per[w]["b"].append(probe.run(cmd, n))
                    probe.window(True)
                    per[w]["c"].append(probe.run(cmd, n))
                    probe.window(False)
            drops.append(probe.close())
            for w in WORKLOADS:
                for cond, vals in per[w].items():
                    if vals:
                        samples[w][cond].append(statistics.median(vals))
            print(
                f"repeat {rep + 1}/{args.repeats} {'shim' if shim else 'plain'}: "
                + ", ".join(
                    f"{w} {', '.join(f'{c}={statistics.median(v):.3f}' for c, v in per[w].items() if v)}"
                    for w in WORKLOADS
                ),
                flush=True,
            )
    window_s, period_s = (float(x) for x in args.duty.split(","))
    result = {}
    print(f"\nshim overhead, median of {args.repeats} processes per condition, {args.inner} runs each")
    cols = [
        "workload",
        "(a) no shim",
        "(b) shim, window closed",
        "(c) window open",
        "(b)/(a)",
        "(c)/(a)",
        "duty-cycle amortised",
    ]
    print("| " + " | ".join(cols) + " |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for w, (_, n, unit) in WORKLOADS.items():
        a, b, c = (statistics.median(samples[w][k]) for k in "abc")
        amort = (window_s * c + (period_s - window_s) * b) / period_s
        result[w] = {
            "a": a,
            "b": b,
            "c": c,
            "unit": unit,
            "n": n,
            "b_over_a": b / a,
            "c_over_a": c / a,
            "amortised_over_a": amort / a,
            "samples": samples[w],
        }
        print(
            f"| {w} ({n}) | {a:.3f} {unit} | {b:.3f} | {c:.3f} | {100 * (b / a - 1):+.2f}% | "
            f"{100 * (c / a - 1):+.2f}% | {100 * (amort / a - 1):+.2f}% |"
        )
    result["drops"] = drops
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
