"""The fleet library against a real PostgreSQL server started by the test (fleet issue): what one
node promotes, another knows at its next registration; a revert reaches it; hostile rows change
nothing; a fleet store that is away costs a node nothing, and sync catches up when it returns.

Nodes here are two real local stores (SQLite) with their real FleetSync, on one machine. The server
is Debian's PostgreSQL (initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin), run as an
unprivileged user when the tests run as root (PostgreSQL refuses root)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.pgserver import Postgres, available
from gitmd.analysis.fingerprint import Signature
from gitmd.config import FleetConfig
from gitmd.fleet.sync import FleetSync
from gitmd.levers.registry import env_variables
from gitmd.store.db import Store
from gitmd.store.library import Library

TRAIN = Signature(
    ("gemm", "elementwise:GeluCUDAKernelImpl", "gemm", "reduce_kernel"),
    {"gemm": 0.8, "elementwise:GeluCUDAKernelImpl": 0.1, "reduce_kernel": 0.1},
)
KEY = "uid:1000 python /srv/train.py"
GPU = "NVIDIA H200"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    why = available()
    if why:
        pytest.skip(why)
    server = Postgres().init().start()
    yield server
    server.remove()


def node(tmp: Path, name: str, url: str, gpu: str = GPU) -> FleetSync:
    library = Library(Store(tmp / f"{name}.db"), allowed_env=env_variables())
    cfg = FleetConfig(url=url, node=name, pull_every_s=0.2, connect_timeout_s=2.0, sslmode="disable")
    return FleetSync(cfg, library, gpu, "580.159.04")


@pytest.fixture
def fresh(pg: Postgres) -> Postgres:
    pg.sql("DROP TABLE IF EXISTS fleet_events, fleet_schema")
    return pg


def test_a_policy_promoted_on_one_node_is_known_on_another_and_its_revert_follows(
    fresh: Postgres, tmp_path: Path
) -> None:
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000)
    p = a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.4, (1.2, 1.6),
                             {"source": "live"}, GPU, "580.159.04")  # fmt: skip
    assert a.status().outbox == 1
    assert a.run_once() == (1, 0, 0) and a.status().outbox == 0
    assert b.library.by_launch_key(KEY) is None
    assert b.run_once() == (0, 1, 0)
    w = b.library.by_launch_key(KEY)  # B's next registration of the program finds it at launch
    assert w is not None
    (got,) = [x for x in b.library.get(w.id).policies if x.status == "validated"]
    assert got.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "32"} and got.speedup == 1.4
    assert (
        got.evidence["source"] == "fleet"
        and got.evidence["node"] == "a"
        and got.evidence["origin"] == f"a:{p.id}"
    )
    assert b.run_once() == (0, 0, 0) and b.status().outbox == 0  # nothing sent back, nothing twice
    a.library.revert(p.id)  # an admin's revert on A
    assert a.run_once() == (1, 0, 0)
    assert b.run_once() == (0, 1, 0)
    assert [x.status for x in b.library.get(w.id).policies] == ["reverted"]
    assert b.status().pulled == 2 and a.status().pushed == 2


def test_hostile_rows_in_the_fleet_store_are_refused_and_change_nothing(
    fresh: Postgres, tmp_path: Path
) -> None:
    b = node(tmp_path, "b", fresh.url)
    b.run_once()  # the schema is made
    good = {"workload": {"name": "t", "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
                         "launch_keys": [KEY]}, "env": {"OMP_NUM_THREADS": "4"}, "speedup": 1.2}  # fmt: skip
    rows = [
        ("x:1", GPU, {**good, "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
        ("x:2", GPU, {**good, "env": {"BASH_ENV": "/tmp/evil.sh"}}),
        ("x:3", GPU, {**good, "pad": "x" * (70 << 10)}),
        ("x:4", "NVIDIA A100", good),
        ("x:5", GPU, {**good, "speedup": "fast"}),
        ("x:6", GPU, {"env": {}}),
    ]
    for origin, gpu, payload in rows:
        fresh.sql(
            "INSERT INTO fleet_events (kind, node, origin, gpu_model, payload) "
            "VALUES ('policy', 'x', %s, %s, %s)",
            [origin, gpu, json.dumps(payload)],
        )
    assert b.run_once() == (0, 0, len(rows))
    assert b.library.list() == [] and b.library.by_launch_key(KEY) is None
    assert b.status().refused == len(rows)


def test_a_fleet_store_that_is_away_costs_a_node_nothing_and_sync_catches_up(
    fresh: Postgres, tmp_path: Path
) -> None:
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    a.run_once()
    fresh.stop()
    try:
        wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000)
        t0 = time.monotonic()
        a.library.add_policy(wid, {"OMP_NUM_THREADS": "4"}, "validated", 1.3, (1.1, 1.5), {}, GPU)
        assert time.monotonic() - t0 < 0.5  # learning here never waits for the fleet
        t0 = time.monotonic()
        assert a.run_once() == (0, 0, 0)  # failed, counted, said; nothing lost
        assert time.monotonic() - t0 < 5.0
        st = a.status()
        assert st.errors >= 1 and st.outbox == 1 and st.last_error
    finally:
        fresh.start()
    assert a.run_once() == (1, 0, 0)  # back: the outbox catches up
    assert b.run_once() == (0, 1, 0) and b.library.by_launch_key(KEY) is not None


def test_a_daemon_with_the_fleet_on_starts_and_syncs(fresh: Postgres, tmp_path: Path) -> None:
    """The real daemon with [fleet]: it starts, its sync thread makes the fleet schema, and a
    registration that misses the library asks for a round."""
    from tests.integration.conftest import SIM_CONFIG, Daemon

    cfg = tmp_path / "gitmd.toml"
    cfg.write_text(
        SIM_CONFIG.format(port=0)
        + f'\n[fleet]\nurl = "{fresh.url}"\nnode = "d1"\npull_every_s = 1\nsslmode = "disable"\n'
    )
    d = Daemon(prefix=tmp_path / "var", config=cfg).start()
    try:
        import psycopg

        deadline = time.monotonic() + 20
        while True:
            with psycopg.connect(fresh.url, autocommit=True) as c:
                made = c.execute("SELECT to_regclass('fleet_events') IS NOT NULL").fetchone()
            if made and made[0]:
                break
            assert time.monotonic() < deadline, "the daemon's fleet sync never reached the server"
            time.sleep(0.2)
        assert d.log_path is not None and "fleet: node d1 syncs with" in d.log_path.read_text()
    finally:
        d.stop()


def test_what_stays_on_its_node_and_what_a_revert_may_touch(fresh: Postgres, tmp_path: Path) -> None:
    """A user's `gitmctl tune` result (scoped to them) stays on its node; a policy reverted here is
    not brought back by the same event seen again; a fleet revert touches only what the fleet
    brought, never a policy this node learned itself."""
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000)
    a.library.add_policy(wid, {"OMP_NUM_THREADS": "4"}, "validated", 9.0, (8.0, 10.0),
                         {"source": "tune", "scope_uid": 1000}, GPU)  # fmt: skip
    good = a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.3, (1.1, 1.5),
                                {"source": "live"}, GPU)  # fmt: skip
    assert a.run_once() == (2, 0, 0)  # both leave the outbox; only one becomes an event
    assert b.run_once() == (0, 1, 0)
    w = b.library.by_launch_key(KEY)
    assert w is not None
    (got,) = b.library.get(w.id).policies
    assert got.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    b.library.revert(got.id, push=False)  # a regression here
    fresh.sql(  # the same event delivered again (a push retried after a crash)
        "INSERT INTO fleet_events (kind, node, origin, gpu_model, payload) "
        "SELECT kind, node, origin, gpu_model, payload FROM fleet_events WHERE origin = %s",
        [f"a:{good.id}"],
    )
    b.run_once()
    assert [p.status for p in b.library.get(w.id).policies] == ["reverted"]  # not brought back
    mine = b.library.add_policy(w.id, {"OMP_NUM_THREADS": "4"}, "validated", 1.2, (1.1, 1.3), {}, GPU)
    fresh.sql(  # a revert naming B's own policy as its origin
        "INSERT INTO fleet_events (kind, node, origin, gpu_model, payload) "
        "VALUES ('revert', 'x', %s, %s, '{}')",
        [f"b:{mine.id}", GPU],
    )
    b.run_once()
    assert next(p for p in b.library.get(w.id).policies if p.id == mine.id).status == "validated"
