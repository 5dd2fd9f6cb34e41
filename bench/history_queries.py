"""The run-history questions a registration asks (gitmd/jobs/history.py), on a launch key with many
runs: how long each takes as the jobs table grows.

A recurring job launched once a minute has ~40,000 runs of its key after four weeks (daemon.keep_days
keeps them). The store is filled directly (ended runs of one key, each its own command line as a
seed in it would make, one in 32 observed, all of one workload), then each question is asked REPS
times and its mean reported:
  - earlier_runs_s of one command line (a line run once, long ago; a new line; the latest line);
  - observation_record of one command line, of the key, and of the workload.
Questions the checkout's code does not have are reported as "not in this checkout".

    python bench/history_queries.py --runs 40000 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.config import CaptureConfig  # noqa: E402
from gitmd.jobs.registry import JobRegistry  # noqa: E402
from gitmd.store.db import Store  # noqa: E402

KEY = "uid:1000 python /w/train.py"


def fill(store: Store, runs: int) -> None:
    t0 = time.time_ns() - runs * 60 * 10**9
    with store.transaction() as db:
        for i in range(runs):
            created = t0 + i * 60 * 10**9
            db.execute(
                "INSERT INTO jobs (id, name, command, cwd, uid, gid, state, created_ns, ended_ns, exit_code, "
                "launch_key, run_s, windows, workload_id) "
                "VALUES (?, 'train', ?, '/w', 1000, 1000, 'exited', ?, ?, 0, ?, 10.0, ?, 'w1')",
                [
                    uuid.uuid4().hex[:12],
                    json.dumps(["python", "train.py", "--seed", str(i)]),
                    created,
                    created + 10**9,
                    KEY,
                    1 if i % 32 == 0 else 0,
                ],
            )


def timed(ask: Any, reps: int) -> float | None:
    try:
        ask()
    except TypeError:
        return None  # a question this checkout's code does not have
    start = time.perf_counter()
    for _ in range(reps):
        ask()
    return (time.perf_counter() - start) / reps * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    store = Store(tmp / "g.db")
    reg = JobRegistry(store, tmp / "run", CaptureConfig())
    fill(store, args.runs)
    now = time.time_ns()
    lines = {
        "a line run once, long ago": (["python", "train.py", "--seed", "0"], "/w"),
        "a new line": (["python", "train.py", "--seed", "new"], "/w"),
        "the latest line": (["python", "train.py", "--seed", str(args.runs - 1)], "/w"),
    }
    got: dict[str, float | None] = {}
    for label, line in lines.items():
        got[f"earlier_runs_s, {label}"] = timed(
            lambda line=line: reg.earlier_runs_s(KEY, now, 1, "registration", line), args.reps
        )
        got[f"observation_record, {label}"] = timed(
            lambda line=line: reg.observation_record(KEY, now, line), args.reps
        )
    got["observation_record, the key"] = timed(lambda: reg.observation_record(KEY, now), args.reps)
    got["observation_record, the workload"] = timed(
        lambda: reg.observation_record(KEY, now, workload_id="w1"), args.reps
    )
    print(f"{args.runs} runs of one key, mean of {args.reps} questions each\n")
    print("| question | ms |\n| --- | --- |")
    for q, ms in got.items():
        print(f"| {q} | {'not in this checkout' if ms is None else f'{ms:.3f}'} |")
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "reps": args.reps, "ms": got}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
