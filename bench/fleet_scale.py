#!/usr/bin/env python3
"""The fleet library at scale (fleet issue): many nodes, the real sync code (gitmd.fleet.FleetSync,
each node with its own real SQLite store), against a real PostgreSQL server started here.

The fleet store starts with ``--history`` policy events already in its log (the workloads learned
before; every node starts caught up, as a node that has been running). Then for ``--seconds`` each
node runs a sync round every ``--every`` seconds at its own random phase (4 worker threads run the
rounds that are due), while ``--promotions`` policies are promoted on random nodes at random times.
The lag of a promotion on a node is the time from its push's commit to the round that applied it
there. Reports lag p50/p99/max over every (promotion, node), rounds late against their schedule,
the server's load (transactions, rows read, its processes' CPU time) and whether every node got
every promotion.

    python3 bench/fleet_scale.py --nodes 1000 --history 100000 --seconds 120 --every 30 \\
        --promotions 50 --json OUT.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.pgserver import Postgres, available  # noqa: E402
from gitmd.analysis.fingerprint import Signature  # noqa: E402
from gitmd.config import FleetConfig  # noqa: E402
from gitmd.fleet.sync import FleetSync  # noqa: E402
from gitmd.levers.registry import env_variables  # noqa: E402
from gitmd.store.db import Store  # noqa: E402
from gitmd.store.library import Library  # noqa: E402

GPU = "NVIDIA H200"


def signature(i: int) -> Signature:
    k = f"kernel_{i}"
    return Signature((k, "gemm", k, "reduce"), {k: 0.5, "gemm": 0.3, "reduce": 0.2})


def history(pg: Postgres, n: int) -> None:
    """``n`` policy events from 50 earlier nodes, one workload each, written in one statement."""
    pg.sql(
        """
        INSERT INTO fleet_events (kind, node, origin, gpu_model, payload)
        SELECT 'policy', 'old-' || mod(i, 50), 'old-' || mod(i, 50) || ':' || i, %s,
               jsonb_build_object(
                   'workload', jsonb_build_object(
                       'name', 'w' || i,
                       'signature', jsonb_build_object(
                           'sequence', jsonb_build_array('k' || i, 'gemm'),
                           'shares', jsonb_build_object('k' || i, 0.6, 'gemm', 0.4)),
                       'launch_keys',
                       jsonb_build_array('uid:' || (1000 + mod(i, 100)) || ' python /srv/w' || i || '.py')),
                   'env', jsonb_build_object('OMP_NUM_THREADS', '4'),
                   'speedup', 1.1, 'ci', jsonb_build_array(1.05, 1.15))
        FROM generate_series(1, %s) AS i
        """,
        [GPU, n],
    )


def server_load(pg: Postgres) -> dict[str, float]:
    (row,) = pg.sql(
        "SELECT xact_commit, tup_returned, tup_fetched, tup_inserted FROM pg_stat_database "
        "WHERE datname = 'postgres'"
    )
    return {"xact_commit": float(row[0]), "tup_returned": float(row[1]), "tup_fetched": float(row[2]),  # type: ignore[arg-type]
            "tup_inserted": float(row[3])}  # type: ignore[arg-type]  # fmt: skip


def postgres_cpu_s(pg: Postgres) -> float:
    """CPU seconds of the server's processes (owned by its data folder's user), from /proc."""
    import os

    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            if b"postgres" not in cmd:
                continue
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / tick
        except OSError:
            continue
    return total


def join(pg: Postgres, top: Path, every: float) -> dict[str, Any]:
    """A node joining the fleet with an empty store: its rounds back to back (what its sync thread
    does while a pull returns a full batch) until it has caught up with the whole history. Time to
    catch up, rounds, what it applied, and how long one registration's library lookup then takes on
    its store (the store it built)."""
    lib = Library(Store(top / "joiner.db"), allowed_env=env_variables())
    n = FleetSync(FleetConfig(url=pg.url, node="joiner", pull_every_s=every, sslmode="disable"), lib, GPU, "")
    t0 = time.monotonic()
    rounds = pulled = 0
    slowest = 0.0
    while True:
        r0 = time.monotonic()
        _, got, _ = n.run_once()
        slowest = max(slowest, time.monotonic() - r0)
        rounds += 1
        pulled += got
        if not n.behind:
            break
    took = time.monotonic() - t0
    keys = [f"uid:{1000 + i % 100} python /srv/w{i}.py" for i in range(1, 1001)]
    look = []
    for k in keys:
        s0 = time.perf_counter()
        lib.by_launch_key(k)
        look.append(time.perf_counter() - s0)
    q = statistics.quantiles(look, n=100)
    return {"catch_up_s": took, "rounds": rounds, "applied": pulled, "events_per_s": pulled / took,
            "slowest_round_s": slowest, "lookup_ms": {"p50": q[49] * 1e3, "p99": q[98] * 1e3}}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--every", type=float, default=30, help="fleet.pull_every_s of every node")
    ap.add_argument("--promotions", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--join", action="store_true", help="also: a node joining with an empty store catches up")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    why = available()
    if why:
        print(f"not run: {why}")
        return 2
    logging.basicConfig(level=logging.ERROR)
    pg = Postgres(max_connections=max(100, a.workers * 4)).init().start()
    top = Path(tempfile.mkdtemp(prefix="gitm-fleet-"))
    try:
        t0 = time.monotonic()
        nodes = []
        for i in range(a.nodes):
            lib = Library(Store(top / f"n{i}.db"), allowed_env=env_variables())
            cfg = FleetConfig(url=pg.url, node=f"n{i}", pull_every_s=a.every, sslmode="disable")
            nodes.append(FleetSync(cfg, lib, GPU, "580.159.04"))
        nodes[0].run_once()  # the schema
        history(pg, a.history)
        (head,) = pg.sql("SELECT max(seq) FROM fleet_events")[0]
        for n in nodes:  # every node starts caught up
            with n.store.transaction() as db:
                db.execute("UPDATE fleet_state SET cursor = ? WHERE id = 1", [head])
        setup_s = time.monotonic() - t0
        print(f"{a.nodes} nodes, {a.history} events of history, set up in {setup_s:.0f} s", flush=True)
        joined = join(pg, top, a.every) if a.join else None
        if joined is not None:
            print(f"a joining node: {json.dumps(joined)}", flush=True)

        rng = random.Random(2026)
        start = time.monotonic()
        due = [(start + rng.uniform(0, a.every), i) for i in range(a.nodes)]
        heapq.heapify(due)
        promos = sorted(
            (start + rng.uniform(0, a.seconds * 0.5), rng.randrange(a.nodes), k) for k in range(a.promotions)
        )
        late: list[float] = []
        busy: set[int] = set()
        lock = threading.Lock()
        load0, cpu0 = server_load(pg), postgres_cpu_s(pg)

        def round_of(i: int, when: float) -> None:
            late.append(time.monotonic() - when)
            nodes[i].run_once()
            with lock:
                busy.discard(i)

        with ThreadPoolExecutor(max_workers=a.workers) as pool:
            pi = 0
            while time.monotonic() - start < a.seconds:
                now = time.monotonic()
                while pi < len(promos) and promos[pi][0] <= now:  # a node promotes a policy
                    _, i, k = promos[pi]
                    lib = nodes[i].library
                    wid = lib.observe(
                        signature(k), f"uid:1000 python /srv/p{k}.py", f"p{k}", True, owner_uid=1000
                    )
                    lib.add_policy(
                        wid, {"OMP_NUM_THREADS": "4"}, "validated", 1.2, (1.1, 1.3), {"source": "live"}, GPU
                    )
                    pi += 1
                while due and due[0][0] <= now:
                    when, i = heapq.heappop(due)
                    with lock:
                        if i not in busy:
                            busy.add(i)
                            pool.submit(round_of, i, when)
                    heapq.heappush(due, (when + a.every, i))
                time.sleep(0.01)
        load1, cpu1 = server_load(pg), postgres_cpu_s(pg)
        # lags from the stores: applied (the local policy's created_ns) - pushed (the event's commit)
        rows = pg.sql("SELECT seq, extract(epoch FROM created_at) FROM fleet_events WHERE node LIKE 'n%%'")
        pushed = {int(s): float(t) for s, t in rows}  # type: ignore[call-overload]
        lags: list[float] = []
        got = 0
        for n in nodes:
            with n.store.reading() as db:
                for seq, created_ns in db.conn.execute(
                    "SELECT json_extract(evidence, '$.fleet_seq'), created_ns FROM policies "
                    "WHERE json_extract(evidence, '$.source') = 'fleet'"
                ):
                    if int(seq) in pushed:
                        lags.append(created_ns / 1e9 - pushed[int(seq)])
                        got += 1
        expected = len(pushed) * (a.nodes - 1)
        q = statistics.quantiles(lags, n=100) if len(lags) >= 2 else [float("nan")] * 99
        doc: dict[str, Any] = {
            "nodes": a.nodes, "history": a.history, "seconds": a.seconds, "every_s": a.every,
            "promotions_pushed": len(pushed), "applied": got, "expected_within_run": expected,
            "lag_s": {"p50": q[49], "p99": q[98], "max": max(lags) if lags else None},
            "rounds": len(late), "round_late_s": {"p50": statistics.median(late) if late else None,
                                                   "max": max(late) if late else None},
            "server": {k: load1[k] - load0[k] for k in load0} | {"cpu_s": cpu1 - cpu0},
            "setup_s": setup_s, "join": joined,
        }  # fmt: skip
        print(json.dumps(doc, indent=1))
        if a.json:
            a.json.write_text(json.dumps(doc, indent=1))
    finally:
        pg.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
