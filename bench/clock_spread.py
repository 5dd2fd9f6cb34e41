#!/usr/bin/env python3
"""Which clock tells two runs of a program apart: the launcher's (exec to exit), CUDA's start to the
exit as gitmd's clock library stamps it (shim/src/clock.c), or the program's own log line; and what
the library costs. No daemon: the library is loaded as a plan loads it (CUDA_INJECTION64_PATH) with
a stamp file as `gitmctl run` names one (GITMD_CLOCK_FILE), and read as gitmctl reads it.

    python3 bench/clock_spread.py --programs timm-mobilenetv3-infer-b1 --runs 8 --json OUT.json

Per program, ``--runs`` runs alternate with the library and without it (L, N, N, L, L, N, ...),
after one warm-up run that is not scored (a call's first run of a program pays for cold caches).
For each clock it reports the spread of the runs that have it, (max - min) / median, and the
standard deviation of the log of consecutive runs' ratio (what one pair of a launch trial varies
by); and the library's cost, the median ratio of the program's own clock with it against without
it (above 1: slower with it). A figure that could not be measured is null, never an estimate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.crash_soak import CORPUS, Program, clock, corpus_programs  # noqa: E402
from gitmctl.launch import read_clock  # noqa: E402

LIB = ROOT / "shim" / "build" / "libgitm_clock.so"


def one(p: Program, with_lib: bool, timeout_s: float, log: Path) -> dict[str, Any]:
    env = {**os.environ, **p.env}
    stamps = ""
    if with_lib:
        fd, stamps = tempfile.mkstemp(prefix="gitmd-clock-", suffix=".txt")
        os.close(fd)
        env |= {"CUDA_INJECTION64_PATH": str(LIB), "GITMD_CLOCK_FILE": stamps}
    t0 = time.monotonic_ns()
    try:
        r = subprocess.run(p.argv, cwd=p.cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        code, out, err = None, "", f"timed out after {timeout_s} s"
    t1 = time.monotonic_ns()
    with open(log, "a") as f:
        f.write(
            f"=== {p.name} {'library' if with_lib else 'plain'} exit {code}\n{out[-3000:]}\n{err[-3000:]}\n"
        )
    own = clock(p, err if p.clock_stream == "stderr" else out)
    return {
        "library": with_lib,
        "exit": code,
        "wall_s": round((t1 - t0) / 1e9, 4),
        "cuda_s": read_clock(stamps, t0, t1) if stamps else None,
        "own": own,
    }


def spread(xs: list[float]) -> dict[str, Any]:
    """The runs' spread on one clock: (max - min) / median, and the sd of log(x[i+1] / x[i]) over
    consecutive runs: the noise of one pair."""
    xs = [x for x in xs if x]
    if len(xs) < 3:
        return {"runs": len(xs), "spread": None, "pair_sd": None}
    logs = [math.log(b / a) for a, b in itertools.pairwise(xs)]
    return {
        "runs": len(xs),
        "median": round(statistics.median(xs), 4),
        "spread": round((max(xs) - min(xs)) / statistics.median(xs), 4),
        "pair_sd": round(statistics.stdev(logs), 4) if len(logs) > 1 else None,
    }


def measure(p: Program, runs: int, timeout_s: float, log: Path, deadline: float) -> dict[str, Any]:
    warm = one(p, False, timeout_s, log)
    order = [(i // 2 + i) % 2 == 0 for i in range(runs)]  # L N N L L N N L ...
    got: list[dict[str, Any]] = []
    for with_lib in order:
        if time.monotonic() > deadline:
            break
        got.append(one(p, with_lib, timeout_s, log))
        print(f"{p.name}: {json.dumps(got[-1])}", flush=True)
    ok = [g for g in got if g["exit"] == 0]
    lib = [g for g in ok if g["library"]]
    plain = [g for g in ok if not g["library"]]
    cost = None
    own_lib = [g["own"] for g in lib if g["own"]]
    own_plain = [g["own"] for g in plain if g["own"]]
    if own_lib and own_plain:
        cost = round(statistics.median(own_lib) / statistics.median(own_plain), 4)
    return {
        "program": p.name,
        "warm_up": warm,
        "runs": got,
        "clocks": {
            "wall_s": spread([g["wall_s"] for g in ok]),
            "cuda_s": spread([g["cuda_s"] for g in lib]),
            "own": spread([g["own"] for g in ok if g["own"]]),
        },
        # the CUDA part's share of the run: what a lever acting on it can move the wall clock by
        "cuda_share": round(statistics.median([g["cuda_s"] / g["wall_s"] for g in lib if g["cuda_s"]]), 4)
        if any(g["cuda_s"] for g in lib)
        else None,
        "library_cost_own_clock": cost,
        "library_runs_stamped": sum(1 for g in lib if g["cuda_s"]),
        "library_runs": len(lib),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", required=True, help="corpus programs (bench/corpus/manifest.toml), a,b")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--timeout-s", type=float, default=120)
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="start no run after this")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=CORPUS / "src")
    a = ap.parse_args(argv)
    if not LIB.is_file():
        ap.error(f"{LIB} is not built (make -C shim)")
    known = corpus_programs(src=a.src)
    names = [n for n in a.programs.split(",") if n]
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown program(s) {bad}")
    deadline = time.monotonic() + a.budget_s
    log = a.json.with_suffix(".log.txt")
    results = []
    for name in names:
        if time.monotonic() > deadline:
            print(f"{name}: not run (budget spent)", flush=True)
            continue
        results.append(measure(known[name], a.runs, a.timeout_s, log, deadline))
        a.json.write_text(json.dumps({"argv": sys.argv, "programs": results}, indent=1))
    print("| program | clock | runs | median | spread | pair sd |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        for k, v in r["clocks"].items():
            cells = [r["program"], k, v["runs"], v.get("median"), v["spread"], v["pair_sd"]]
            print("| " + " | ".join("not measured" if c is None else str(c) for c in cells) + " |")
        print(f"{r['program']}: CUDA part {r['cuda_share']} of the run; the library's cost on the program's "
              f"own clock {r['library_cost_own_clock']}; {r['library_runs_stamped']} of "
              f"{r['library_runs']} library runs stamped")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
