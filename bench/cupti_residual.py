#!/usr/bin/env python3
"""What a capture window leaves behind once it closes, kind by kind (GPU host).

gitmd never detaches CUPTI from a running job (cuptiFinalize crashed unmodified jobs on the H200,
bench/results/2026-12-03-crash-h200.md), so whatever a window switches on and cannot switch fully off
is paid by the job for the rest of its run. This measures that residual for each kind of collection,
each in its own probe process (bench/workloads/overhead_probe.py, pinned to GITM_BENCH_CPUS), inside
the process: loaded (L), on (O), off again (R), as L L L O R O R O R R after a warm-up, so that the
ratios R/L and O/L are free of process-to-process noise. `plain` (no injection) takes the same phases
with nothing switched: its R/L is the drift of a process left alone.

Modes: plain; the injection library bench/cupti_residual.c with GITM_RESIDUAL_MODE = none, ckernel,
kernel, runtime, driver, copies (memcpy, memset, sync and memory together) and each alone, launchcb,
ckernel-finalize; and gitmd's own shim, its window opened
and closed through the ring's control page as gitmd does, with the kinds asked: shim-all (every
kind), shim-default (capture.kinds' default: all but memset), shim-kernel (kernel activity only),
shim-callbacks (payload, streams and host-source callbacks, no activity), shim-payload and
shim-streams (one of those each). Since 2026-12-04 (40633ca) the shim's sync kind is timed from
callbacks, not SYNCHRONIZATION activity: shim-all measured before that is another thing.

    python3 bench/cupti_residual.py --repeats 3 --json OUT.json [--modes a,b] [--budget-s 400]
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
from gitmd.capture.windows import KIND_BITS  # noqa: E402
from gitmd.config import CAPTURE_KINDS  # noqa: E402
from gitmd.config.sections import DEFAULT_CAPTURE_KINDS  # noqa: E402

SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
LIB = ROOT / "shim" / "build" / "libcupti_residual.so"
PROBE = ROOT / "bench" / "workloads" / "overhead_probe.py"
LIB_MODES = (
    "none", "ckernel", "kernel", "runtime", "driver", "copies", "memcpy", "memset", "sync", "memory",
    "launchcb", "ckernel-finalize",
)  # fmt: skip
SHIM_MASKS = {
    "shim-all": sum(KIND_BITS[k] for k in CAPTURE_KINDS),
    "shim-default": sum(KIND_BITS[k] for k in DEFAULT_CAPTURE_KINDS),  # what gitmd's windows ask now
    "shim-kernel": KIND_BITS["kernel"],
    "shim-callbacks": KIND_BITS["payload"] | KIND_BITS["streams"] | KIND_BITS["hostsrc"],
    "shim-payload": KIND_BITS["payload"],
    "shim-streams": KIND_BITS["streams"],
    # the parts of the default window, to find what its residual is made of (call 3 of 2026-12-04
    # left +13.5% on the training step where kernel and memcpy alone left +3.5% and +2.9%)
    "shim-sync": KIND_BITS["sync"],  # the host's syncs, timed from their driver API callbacks
    "shim-hostsrc": KIND_BITS["hostsrc"],
    "shim-memory": KIND_BITS["memory"],
    "shim-kernel-memcpy": KIND_BITS["kernel"] | KIND_BITS["memcpy"],
}
MODES = ("plain", *LIB_MODES, *SHIM_MASKS)
# what each phase measures: (probe command, count, unit)
WORK = (("launch", 20000, "µs/op"), ("small", 200, "ms/step"))
# W: a warm-up, not counted (the first seconds of a process run slower: clocks, caches); then the
# process loaded (L) three times, and on (O) / off again (R) alternately
PHASES = "WLLLORORORR"


class Probe:
    def __init__(self, mode: str, tmp: Path) -> None:
        env = dict(os.environ)
        env.setdefault("GITM_BENCH_CPUS", "2,3")
        self.mode, self.seq = mode, 0
        self.ring: Ring | None = None
        d = Path(tempfile.mkdtemp(dir=tmp))
        self.control = d / "control"
        self.report = d / "report"
        if mode in LIB_MODES:
            env.update(
                CUDA_INJECTION64_PATH=str(LIB),
                GITM_RESIDUAL_MODE=mode,
                GITM_RESIDUAL_CONTROL=str(self.control),
                GITM_RESIDUAL_REPORT=str(self.report),
            )
        elif mode in SHIM_MASKS:
            # the shim as gitmd launches it: never detached (GITM_SHIM_DETACH unset)
            env.update(GITM_JOB_DIR=str(d), CUDA_INJECTION64_PATH=str(SHIM), GITM_RING_RECORDS=str(1 << 20))
            env.pop("GITM_SHIM_DETACH", None)
        self.p = subprocess.Popen(
            [sys.executable, str(PROBE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.p.stdout is not None
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"{mode}: probe did not start: {line!r}")
        if mode in SHIM_MASKS:
            rings = list(d.glob("ring-*.gitm"))
            if len(rings) != 1:
                raise RuntimeError(f"{mode}: expected one ring in {d}, found {rings}")
            self.ring = Ring(rings[0])

    def run(self, cmd: str, n: int) -> float:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(f"{cmd} {n}\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError(f"{self.mode}: the probe died (exit {self.p.wait(10)})")
        return float(out)

    def switch(self, on: bool) -> None:
        deadline = time.monotonic() + 30
        if self.ring is not None:
            ring = self.ring
            seq = ring.open_window(1, SHIM_MASKS[self.mode], 250, 600_000) if on else ring.close_window()
            while not self.ring.acked(seq):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.mode}: the shim did not acknowledge")
                time.sleep(0.001)
            self.ring.drain()
        elif self.mode in LIB_MODES:
            self.seq += 1
            tmp = self.control.with_suffix(".tmp")
            tmp.write_text(f"{self.seq} {int(on)}\n")
            tmp.rename(self.control)
            ack = Path(f"{self.control}.ack")
            while True:
                got = ack.read_text().split() if ack.exists() else []
                if got and got[0] == str(self.seq):
                    if got[1] != "0":
                        what = "on" if on else "off"
                        raise RuntimeError(f"{self.mode}: CUPTI error {got[1]} switching {what}")
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.mode}: the library did not acknowledge")
                time.sleep(0.001)
        if on:  # the first enable instruments the loaded modules: warm it before measuring
            self.run("launch", 2000)
            self.run("small", 20)

    def phases(self) -> dict[str, dict[str, list[float]]]:
        got: dict[str, dict[str, list[float]]] = {w: {p: [] for p in "WLOR"} for w, _, _ in WORK}
        state = False
        for ph in PHASES:
            want = ph == "O"
            if want != state:
                self.switch(want)
                state = want
            for w, n, _ in WORK:
                got[w][ph].append(self.run(w, n))
        if state:
            self.switch(False)
        return got

    def close(self) -> dict[str, int]:
        assert self.p.stdin is not None
        self.p.stdin.close()
        rc = self.p.wait(60)
        counts = {"exit": rc}
        if self.report.exists():
            rec, launches = self.report.read_text().split()
            counts.update(records=int(rec), launch_callbacks=int(launches))
        if self.ring is not None:
            counts["ring_records"] = self.ring.status().records_written
            self.ring.close()
        return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="processes of each mode")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--budget-s", type=float, default=0, help="start no new round after this many seconds")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"unknown mode(s): {', '.join(bad)} (modes: {', '.join(MODES)})")
    for need in (LIB, SHIM):
        if not need.exists():
            raise SystemExit(f"{need} is not built (make -C shim all)")
    tmp = Path(tempfile.mkdtemp(prefix="gitm-residual-"))
    rows: list[dict[str, object]] = []
    t0 = time.monotonic()
    for r in range(a.repeats):
        if a.budget_s and r and time.monotonic() - t0 > a.budget_s:
            print(f"budget: stopped after {r} rounds", file=sys.stderr)
            break
        turn = modes[r % len(modes) :] + modes[: r % len(modes)]
        for m in turn:
            try:
                p = Probe(m, tmp)
                got = p.phases()
                rows.append({"mode": m, "round": r, "phases": got, **p.close()})
            except (RuntimeError, OSError, ValueError) as e:
                rows.append({"mode": m, "round": r, "error": str(e)})
                print(f"{m} round {r}: {e}", file=sys.stderr)
        print(f"round {r + 1}/{a.repeats} done ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    print("in-process ratios, median over processes (each: median of its phases); O: on, R: off again")
    print("| mode | " + " | ".join(f"{w} L {u} | {w} O/L | {w} R/L" for w, _, u in WORK) + " | processes |")
    print("| --- |" + " --- | --- | --- |" * len(WORK) + " --- |")
    summary: dict[str, dict[str, float]] = {}
    for m in modes:
        ok = [row for row in rows if row["mode"] == m and "phases" in row]
        cells = []
        for w, _, _ in WORK:
            ls, ons, rs = [], [], []
            for row in ok:
                ph = row["phases"][w]  # type: ignore[index]
                lv = statistics.median(ph["L"])
                ls.append(lv)
                ons.append(statistics.median(ph["O"]) / lv)
                rs.append(statistics.median(ph["R"]) / lv)
            if ok:
                s = {"L": statistics.median(ls), "O/L": statistics.median(ons), "R/L": statistics.median(rs)}
                summary[f"{m} {w}"] = s
                spread = f" ({min(rs):.3f} to {max(rs):.3f})"
                cells.append(f"{s['L']:.3f} | {s['O/L']:.3f} | {s['R/L']:.3f}{spread}")
            else:
                cells.append("not measured | | ")
        failed = sum(1 for row in rows if row["mode"] == m and "error" in row)
        print(f"| {m} | " + " | ".join(cells) + f" | {len(ok)}{f' ({failed} failed)' if failed else ''} |")
    if a.json:
        doc = {"work": WORK, "phases": PHASES, "rows": rows, "summary": summary}
        a.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
