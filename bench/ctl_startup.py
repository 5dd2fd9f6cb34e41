#!/usr/bin/env python3
"""What `gitmctl run` adds to a job's launch, side by side: a trivial program run plainly and through
`gitmctl run` from one or more source trees (``--trees``, e.g. this checkout and a worktree of an
older commit), interleaved, against one real gitmd on the simulated backend. Reports the median
wall time of each and the difference to the plain run; ``--json`` keeps every sample.

    python3 bench/ctl_startup.py --trees .,/tmp/old --runs 20 --json OUT.json
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

from bench.crash_soak import CONFIG  # noqa: E402
from bench.harness import Gitmd  # noqa: E402

PROGRAM = [sys.executable, "-c", "pass"]


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=cwd)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=".", help="source trees whose gitmctl is timed, comma-separated")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",") if t]
    g = Gitmd(Path(tempfile.mkdtemp(prefix="gitm-ctl-")), CONFIG.format(backend="sim"))
    g.start()
    samples: dict[str, list[float]] = {"plain": [], **{str(t): [] for t in trees}}
    ctl = [sys.executable, "-m", "gitmctl", "--socket", str(g.socket), "run", "--name", "ctl", "--"]
    try:
        for _ in range(a.runs):
            samples["plain"].append(timed(PROGRAM, dict(os.environ)))
            for t in trees:
                # run from the tree: `python -m` puts the working directory first on sys.path,
                # before PYTHONPATH (from this checkout's root every tree's run was this one's)
                env = {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(t), os.environ.get("PYTHONPATH")])),
                }
                samples[str(t)].append(timed([*ctl, *PROGRAM], env, cwd=t))
    finally:
        g.stop()
    plain = statistics.median(samples["plain"])
    print("| run | median s | added to the plain run, s |")
    print("| --- | --- | --- |")
    print(f"| plain | {plain:.3f} | 0 |")
    for t in trees:
        m = statistics.median(samples[str(t)])
        print(f"| gitmctl run ({t}) | {m:.3f} | {m - plain:.3f} |")
    if a.json:
        a.json.write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
