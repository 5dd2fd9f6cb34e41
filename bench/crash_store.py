"""SIGKILL gitmd in the middle of store writes, over and over; the store must stay intact.

Each round: start gitmd on the same state, hammer it with registrations (each a transaction) from
two clients, import a small library now and then, SIGKILL gitmd at a random moment, then open the
database directly: PRAGMA integrity_check must say ok and every policy that an import had reported
as committed must still be there.

    python bench/crash_store.py --rounds 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from bench.harness import Gitmd  # noqa: E402
from gitmd.api.client_auth import open_channel  # noqa: E402
from gitmd.api.pb import pb, pb_grpc  # noqa: E402


def doc(round_: int) -> bytes:
    return json.dumps(
        {
            "format": "gitm-library",
            "version": 1,
            "workloads": [
                {
                    "id": f"{round_:012x}",
                    "name": f"r{round_}",
                    "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
                    "first_seen_ns": 1,
                    "last_seen_ns": 2,
                    "run_count": 1,
                    "launch_keys": [f"python /crash/{round_}.py"],
                    "policies": [
                        {"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "status": "validated", "speedup": 1.1}
                    ],
                }
            ],
        }
    ).encode()


def run(rounds: int, seed: int, verbose: bool = True) -> dict[str, int]:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="gitmd-crash-"))
    daemon = Gitmd(
        tmp / "v",
        '[telemetry]\nbackend = "sim"\ninterval_s = 0.05\n[metrics]\nport = 0\n'
        "[capture]\nwindow_every_s = 0\n",
    )
    sock = daemon.socket
    committed = 0
    kills_mid_write = 0
    for r in range(rounds):
        stub = daemon.start()
        stop = threading.Event()
        counts = [0, 0]

        def client(k: int, stop: threading.Event = stop, counts: list[int] = counts) -> None:
            s = pb_grpc.GitmdStub(open_channel(sock))
            i = 0
            while not stop.is_set():
                try:
                    s.RegisterJob(
                        pb.RegisterJobRequest(
                            name=f"c{k}",
                            command=["python", f"/crash/{i % 50}.py"],
                            cwd="/",
                            uid=os.getuid(),
                            gid=os.getgid(),
                            capture=True,
                        ),
                        timeout=2,
                    )
                    counts[k] += 1
                except grpc.RpcError:
                    return
                i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        try:
            stub.ImportLibrary(pb.LibraryDocument(json=doc(r)), timeout=5)
            committed += 1  # the daemon answered: the import's transaction was committed
        except grpc.RpcError:
            pass
        time.sleep(rng.uniform(0.05, 0.6))
        daemon.stop(signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join(10)
        kills_mid_write += int(sum(counts) > 0)
        with sqlite3.connect(daemon.db) as conn:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
            policies = conn.execute("SELECT COUNT(*) FROM policies").fetchone()[0]
        if ok != "ok" or policies < committed:
            raise SystemExit(f"round {r}: integrity {ok!r}, {policies} policies, {committed} committed")
        if verbose and (r + 1) % 10 == 0:
            print(
                f"round {r + 1}/{rounds}: integrity ok, {policies} policies kept of {committed} committed, "
                f"{sum(counts)} registrations this round",
                flush=True,
            )
    return {"rounds": rounds, "committed_imports": committed, "rounds_killed_while_writing": kills_mid_write}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    result = run(args.rounds, args.seed)
    print(
        f"{result['rounds']} SIGKILLs, {result['rounds_killed_while_writing']} of them during registration "
        f"traffic: integrity_check ok every time; {result['committed_imports']} committed policies, none lost"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
