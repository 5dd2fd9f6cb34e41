#!/usr/bin/env python3
"""Run corpus programs plainly (no gitmd) and record what a manifest entry needs to be trusted: the
exit status, the whole run's wall time (the manifest's ``expected_s``), the program's own clock
samples, its outputs, and the end of stderr when it failed.

    python3 bench/corpus/verify.py --programs cupy-sgemm,flax-nnx-train-state --repeats 2 \\
        --json OUT/corpus-verify.json

A program whose clock regex matched nothing, or whose output regex matched nothing, is reported as
such: the scoreboard could not judge it. Nothing here edits the manifest; the figures go into it by
hand, with the raw file beside them under bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.crash_soak import corpus_programs, run_once  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="", help="names in the manifest, comma-separated (default: all)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--logs", type=Path, default=None, help="the programs' output (default: beside --json)")
    ap.add_argument("--timeout-s", type=float, default=180)
    a = ap.parse_args(argv)
    known = corpus_programs()
    names = [n for n in a.programs.split(",") if n] or sorted(known)
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown program(s) {bad}; known: {sorted(known)}")
    logs = a.logs or a.json.parent / "verify-logs"
    logs.mkdir(parents=True, exist_ok=True)
    doc: dict = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "programs": {}}
    print("| program | exit | wall s | clock | outputs |")
    print("| --- | --- | --- | --- | --- |")
    for name in names:
        p = known[name]
        runs = []
        for _ in range(a.repeats):
            r = run_once(p, [], logs / f"{name}.log", a.timeout_s)
            runs.append({k: r[k] for k in ("exit", "wall_s", "clock", "out", "stderr_tail")})
            clock = "wall" if p.clock == "wall" else (r["clock"] if r["clock"] is not None else "NO MATCH")
            outs = "exit only" if not p.output else (len(r["out"]) or "NO MATCH")
            print(f"| {name} | {r['exit']} | {r['wall_s']} | {clock} | {outs} |", flush=True)
            if r["exit"] != 0:
                print(re.sub(r"\s+", " ", r["stderr_tail"][-600:]), flush=True)
                break
        doc["programs"][name] = {"argv": p.argv, "runs": runs}
    a.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
