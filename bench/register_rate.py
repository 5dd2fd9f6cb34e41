"""RegisterJob over the real Unix socket with a large library: latency and burst rate.

Starts gitmd (simulated GPUs, state in a temporary folder), imports a library of WORKLOADS
workloads (one launch key and one validated policy each), then measures:
  - latency: sequential registrations from one client, half of them known launch keys (the plan
    carries the policy), half unknown; p50/p99;
  - burst: CLIENTS concurrent clients registering as fast as they can for SECONDS; rate and p99.
Registrations are real (capture on: a private runtime directory per job), from 200 users (root
registers for them, as a scheduler does), so no user reaches daemon.max_jobs_per_user.

    python bench/register_rate.py --workloads 10000 --clients 8 --seconds 10
Targets: p99 <= 5 ms sequential; >= 500 registrations/s from 8 clients.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from bench.harness import Gitmd  # noqa: E402
from gitmd.api.client_auth import open_channel  # noqa: E402
from gitmd.api.pb import pb, pb_grpc  # noqa: E402


def library_doc(n: int) -> bytes:
    return json.dumps(
        {
            "format": "gitm-library",
            "version": 1,
            "workloads": [
                {
                    "id": f"{i:012x}",
                    "name": f"w{i}",
                    "signature": {"sequence": ["gemm", f"k{i}"], "shares": {"gemm": 1.0}},
                    "first_seen_ns": 1,
                    "last_seen_ns": 2,
                    "run_count": 1,
                    "launch_keys": [f"uid:{user(i)} python /jobs/train_{i}.py"],  # bound to its user
                    "policies": [
                        {"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "status": "validated", "speedup": 1.05}
                    ],
                }
                for i in range(n)
            ],
        }
    ).encode()


USERS = 200  # registrations come from this many users (each under daemon.max_jobs_per_user open jobs)


def user(i: int) -> int:
    return 20000 + i % USERS


def request(i: int, workloads: int) -> pb.RegisterJobRequest:
    known = i % 2 == 0
    script = f"/jobs/train_{i % workloads}.py" if known else f"/other/job_{i}.py"
    uid = user(i % workloads) if known else user(i)  # a known key is its owner's
    return pb.RegisterJobRequest(
        name=f"j{i}",
        command=["python", script, "--epochs", "3"],
        cwd="/w",
        uid=uid,
        gid=uid,
        capture=True,
    )


def burst_client(sock: str, c: int, workloads: int, start_at: float, seconds: float, queue: Any) -> None:
    stub = pb_grpc.GitmdStub(open_channel(sock))
    stub.GetStatus(pb.GetStatusRequest(), timeout=10)  # connected before the start
    time.sleep(max(0.0, start_at - time.time()))
    out, i, stop = [], 10_000_000 * (c + 1), time.monotonic() + seconds
    while time.monotonic() < stop:
        t = time.perf_counter()
        stub.RegisterJob(request(i, workloads), timeout=10)
        out.append(time.perf_counter() - t)
        i += 1
    queue.put(out)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=int, default=10_000)
    ap.add_argument("--sequential", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fleet", action="store_true", help="with [fleet] on, against a PostgreSQL started here")
    ap.add_argument(
        "--checkpoint-every-s",
        type=float,
        default=None,
        help="daemon.checkpoint_every_s (default: gitmd's); 0: SQLite's own checkpoint in the commits",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gitmd-reg-"))
    # the jobs registered here never start or end: spread over USERS users, each stays under a
    # per-user cap of open jobs that the registrations of this run cannot reach
    conf = '[telemetry]\nbackend = "sim"\n[metrics]\nport = 0\n[capture]\nwindow_every_s = 0\n'
    conf += "[daemon]\nmax_jobs_per_user = 1000\n"
    if args.checkpoint_every_s is not None:
        conf += f"checkpoint_every_s = {args.checkpoint_every_s}\n"
    pg = None
    if args.fleet:
        from bench.pgserver import Postgres

        pg = Postgres().init().start()  # every registration that misses the library asks for a round
        conf += f'[fleet]\nurl = "{pg.url}"\npull_every_s = 1\nsslmode = "disable"\n'
    daemon = Gitmd(tmp / "v", conf)
    sock = daemon.address
    try:
        stub = daemon.start()
        t0 = time.perf_counter()
        r = stub.ImportLibrary(pb.LibraryDocument(json=library_doc(args.workloads)), timeout=600)
        print(f"library: {r.workloads_added} workloads imported in {time.perf_counter() - t0:.1f} s")

        def register(s: pb_grpc.GitmdStub, i: int) -> float:
            t = time.perf_counter()
            resp = s.RegisterJob(request(i, args.workloads), timeout=10)
            dt = time.perf_counter() - t
            if i % 2 == 0 and not resp.plan.policy_id:
                raise SystemExit(f"known launch key without its policy: {resp}")
            return dt

        for i in range(50):
            register(stub, i)  # warm-up
        seq = [register(stub, i) for i in range(args.sequential)]
        lat = {"p50_ms": 1e3 * statistics.median(seq), "p99_ms": 1e3 * percentile(seq, 99)}

        # Each client its own process (as schedulers and gitmctl are), all starting together.
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        start_at = time.time() + 2.0
        procs = [
            ctx.Process(target=burst_client, args=(sock, c, args.workloads, start_at, args.seconds, queue))
            for c in range(args.clients)
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=args.seconds + 120) for _ in procs]
        for p in procs:
            p.join(30)
        allv = [v for r in results for v in r]
        burst = {
            "rate_per_s": len(allv) / args.seconds,
            "p99_ms": 1e3 * percentile(allv, 99),
            "count": len(allv),
        }
    finally:
        daemon.stop()
        if pg is not None:
            pg.remove()
    fleet = " [fleet] on, a real PostgreSQL" if args.fleet else ""
    print(f"RegisterJob with {args.workloads} workloads in the library, over the Unix socket{fleet}")
    print("| measure | value | target |")
    print("| --- | --- | --- |")
    print(f"| sequential p50 | {lat['p50_ms']:.2f} ms | |")
    print(f"| sequential p99 | {lat['p99_ms']:.2f} ms | <= 5 ms |")
    print(f"| burst, {args.clients} clients, {args.seconds:g} s | {burst['rate_per_s']:.0f} /s | >= 500 /s |")
    print(f"| burst p99 | {burst['p99_ms']:.2f} ms | |")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "sequential": lat,
                    "burst": burst,
                    "workloads": args.workloads,
                    "checkpoint_every_s": args.checkpoint_every_s,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
