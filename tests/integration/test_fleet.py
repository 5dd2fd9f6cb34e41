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
from gitmd.jobs.launch_key import command_key
from gitmd.levers.registry import env_variables
from gitmd.store.db import Store
from gitmd.store.library import Library

TRAIN = Signature(
    ("gemm", "elementwise:GeluCUDAKernelImpl", "gemm", "reduce_kernel"),
    {"gemm": 0.8, "elementwise:GeluCUDAKernelImpl": 0.1, "reduce_kernel": 0.1},
)
KEY = "uid:1000 python /srv/train.py"
# the key of the command line a fingerprinted run linked: what the fleet carries and what resolves a
# launch (the script's key alone resolves none: gitmd/loop/launch.py)
CMD = command_key(KEY, ["python", "/srv/train.py"], "/srv")
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
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    p = a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.4, (1.2, 1.6),
                             {"source": "live"}, GPU, "580.159.04")  # fmt: skip
    assert a.status().outbox == 1
    assert a.run_once() == (1, 0, 0) and a.status().outbox == 0
    assert b.library.by_launch_key(CMD) is None
    assert b.run_once() == (0, 1, 0)
    w = b.library.by_launch_key(CMD)  # B's next registration of the program finds it at launch
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
        ("x:7", GPU, {**good, "live": [{"lever": "cpu_affinity", "setting": {}}]}),  # two changes in one
        (
            "x:8",
            GPU,
            {
                **good,
                "env": {},
                "live": [
                    {"lever": "cpu_affinity", "setting": {}},
                    {"lever": "sched_priority", "setting": {"nice": 19}},
                ],
            },
        ),
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
        wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
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
    assert b.run_once() == (0, 1, 0) and b.library.by_launch_key(CMD) is not None


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
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    a.library.add_policy(wid, {"OMP_NUM_THREADS": "4"}, "validated", 9.0, (8.0, 10.0),
                         {"source": "tune", "scope_uid": 1000}, GPU)  # fmt: skip
    good = a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.3, (1.1, 1.5),
                                {"source": "live"}, GPU)  # fmt: skip
    assert a.run_once() == (2, 0, 0)  # both leave the outbox; only one becomes an event
    assert b.run_once() == (0, 1, 0)
    w = b.library.by_launch_key(CMD)
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


def test_a_live_policy_an_admins_pin_and_unpin_reach_every_node(fresh: Postgres, tmp_path: Path) -> None:
    """A live policy (its intent: the CPUs are found anew on each node) is shared like an
    environment one; an admin's pin of a user's own `gitmctl tune` result (scoped to that user,
    not shared until then) reaches every node pinned, and the unpin follows."""
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    b.driver = "590.10"  # another driver branch: shown, decided by the node's own runs
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    live = [{"lever": "cpu_affinity", "setting": {}}]
    a.library.add_policy(wid, {}, "validated", 3.9, (3.5, 4.3), {"source": "live"}, GPU, live=live)
    tuned = a.library.add_policy(wid, {"OMP_NUM_THREADS": "4"}, "validated", 1.5, (1.3, 1.7),
                                 {"source": "tune", "scope_uid": 1000}, GPU)  # fmt: skip
    assert a.run_once() == (2, 0, 0) and b.run_once() == (0, 1, 0)  # the tune result stayed on A
    w = b.library.by_launch_key(CMD)
    assert w is not None
    (got,) = b.library.get(w.id).policies
    assert list(got.live) == live and got.env == {} and got.trust == 1
    assert got.evidence["driver_differs"] == "learned with driver 580.159.04, this node has 590.10"
    assert b.library.get(w.id).live_policy_for(1000) == got
    a.library.pin(tuned.id, "root")  # the admin makes it everyone's
    assert a.run_once() == (1, 0, 0) and b.run_once() == (0, 1, 0)
    pinned = next(p for p in b.library.get(w.id).policies if p.env)
    assert pinned.status == "pinned" and pinned.pinned_by == "fleet: root on a"
    assert b.library.get(w.id).active_policy == pinned
    a.library.unpin(tuned.id)
    assert a.run_once() == (1, 0, 0) and b.run_once() == (0, 1, 0)
    assert b.library.get_policy(pinned.id).status == "validated"


def test_how_a_policy_held_on_each_node_reaches_the_others(fresh: Postgres, tmp_path: Path) -> None:
    """B confirms A's policy on its own runs; C finds it slower: C's copy is reverted there and the
    fleet marks it suspect. A (where it was learned) keeps it and shows how it held on B and C; D,
    which has it from the fleet and has not tried it yet, no longer applies it; B, which confirmed it
    on its own runs, keeps it."""
    a, b, c, d = (node(tmp_path, n, fresh.url) for n in "abcd")
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    p = a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.3, (1.1, 1.5),
                             {"source": "runs"}, GPU)  # fmt: skip
    a.run_once()
    for n in (b, c, d):
        assert n.run_once() == (0, 1, 0)
    copy = {n.node: next(iter(n.library.get(n.library.by_launch_key(CMD).id).policies)) for n in (b, c, d)}
    b.library.confirm(
        copy["b"].id, {"held": True, "suspect": False, "speedup": 1.25, "reason": "1.25x faster"}
    )
    c.library.confirm(
        copy["c"].id, {"held": False, "suspect": True, "speedup": 0.8, "reason": "0.8x: slower"}
    )
    assert b.run_once() == (1, 0, 0) and c.run_once() == (1, 1, 0)
    a.run_once()
    for n in (b, d):
        n.run_once()
    nodes = a.library.get_policy(p.id).evidence["nodes"]
    assert nodes["b"]["held"] and nodes["c"]["suspect"] and nodes["c"]["reason"] == "0.8x: slower"
    assert a.library.get_policy(p.id).status == "validated"  # A's own evidence stands
    assert c.library.get_policy(copy["c"].id).status == "reverted"  # C's own runs decided
    wd = d.library.get(d.library.by_launch_key(CMD).id)
    assert wd.policies[0].evidence["suspect"]["node"] == "c" and wd.active_policy is None
    wb = b.library.get(b.library.by_launch_key(CMD).id)
    assert wb.active_policy is not None and wb.active_policy.id == copy["b"].id  # confirmed on B
    assert wb.policies[0].evidence["nodes"]["c"]["suspect"]
    # E confirms it too: held on two nodes against one suspicion, the mark is lifted and D applies
    # the policy again (the fleet's notes of it kept: who lifted it, on how many nodes it held)
    e = node(tmp_path, "e", fresh.url)
    assert e.run_once()[1] >= 1  # the policy and how it held so far
    copy_e = next(iter(e.library.get(e.library.by_launch_key(CMD).id).policies))
    e.library.confirm(copy_e.id, {"held": True, "suspect": False, "speedup": 1.2, "reason": "1.2x faster"})
    e.run_once()
    d.run_once()
    wd = d.library.get(d.library.by_launch_key(CMD).id)
    ev = wd.policies[0].evidence
    assert "suspect" not in ev and ev["suspect_cleared"]["held_on"] == 2
    assert ev["suspect_cleared"]["by"] == "e"
    assert wd.active_policy is not None and wd.active_policy.id == wd.policies[0].id


def test_two_daemons_what_one_learns_and_its_admin_pins_the_other_launches_with(
    fresh: Postgres, tmp_path: Path
) -> None:
    """Two real daemons as two nodes, the real CLI over their sockets: on d1 `gitmctl tune` runs a
    real experiment (paired trials of a program that OpenMP's thread count speeds up) and its
    admin pins the result; d2 has it from the fleet within seconds, and its next `gitmctl run` of
    the program launches with it: no trial, no window. `library list --fleet` shows where it came
    from; `library show` why it is in force."""
    import os
    import subprocess
    import sys

    from gitmd.jobs.launch_key import launch_key, owned
    from tests.integration.conftest import SIM_CONFIG, Daemon, command, ctl, ctl_json
    from tests.integration.test_tune import PROG, library_doc

    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    doc = tmp_path / "lib.json"
    doc.write_text(
        json.dumps(library_doc(owned(os.getuid(), launch_key([sys.executable, str(prog)], str(tmp_path)))))
    )
    daemons = []
    for name in ("d1", "d2"):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(
            SIM_CONFIG.format(port=0)
            + f'\n[fleet]\nurl = "{fresh.url}"\nnode = "{name}"\npull_every_s = 0.5\nsslmode = "disable"\n'
        )
        daemons.append(Daemon(prefix=tmp_path / name, config=cfg).start())
    d1, d2 = daemons
    try:
        ctl(d1.socket, "library", "import", str(doc))
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d1.socket), "tune", "--levers", "cpu_threads", "--json",
             "--", sys.executable, str(prog)],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        policy = json.loads(r.stdout)["policy"]
        ctl(d1.socket, "library", "pin", str(policy["id"]))
        deadline = time.monotonic() + 30
        while True:
            listed = ctl_json(d2.socket, "library", "list", "--fleet")["fleet"]
            if listed and listed[0]["state"] == "pinned" and int(listed[0].get("local_policy_id", 0)):
                break
            assert time.monotonic() < deadline, f"d2 never had d1's pin: {listed}"
            time.sleep(0.3)
        (f,) = listed
        assert (
            f["origin"] == f"d1:{policy['id']}" and f["node"] == "d1" and f["env"]["OMP_NUM_THREADS"] == "4"
        )
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d2.socket), "run", "--", sys.executable, str(prog)],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0 and "step_ms=150.0" in r.stdout, r.stdout + r.stderr  # with it: faster
        assert "launching with its pinned policy" in r.stderr, r.stderr
        (job,) = ctl_json(d2.socket, "jobs", "--all")["jobs"]
        # no experiment on d2: launched with the policy, no capture window
        assert int(job["policy_id"]) == int(f["local_policy_id"]) and int(job.get("windows", 0)) == 0, job
        shown = ctl(d2.socket, "library", "show", job["workload_id"]).stdout
        assert "pinned by fleet: " in shown and "on d1" in shown, shown
        table = ctl(d2.socket, "library", "list", "--fleet").stdout
        assert f"d1:{policy['id']}" in table and "pinned" in table, table
        r = ctl(d1.socket, "library", "list", "--fleet", "--limit", "0", check=False)
        assert r.returncode == 2 and "--limit must be 1..1000" in r.stderr
    finally:
        for d in daemons:
            d.stop()


def test_library_list_fleet_on_a_node_without_the_fleet_says_so(tmp_path: Path) -> None:
    from tests.integration.conftest import SIM_CONFIG, Daemon, ctl

    cfg = tmp_path / "gitmd.toml"
    cfg.write_text(SIM_CONFIG.format(port=0))
    d = Daemon(prefix=tmp_path / "var", config=cfg).start()
    try:
        r = ctl(d.socket, "library", "list", "--fleet", check=False)
        assert r.returncode != 0 and "the fleet is off on this node" in r.stderr, r.stderr
    finally:
        d.stop()


def test_a_node_joining_a_long_history_pulls_back_to_back_until_caught_up(
    fresh: Postgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round pulls one batch at most; while a pull comes back full the sync thread runs the next
    round at once, not pull_every_s later (at 500 a round and 30 s apart, a node joining a fleet
    with 100,000 events would take 100 minutes to know them)."""
    import gitmd.fleet.sync as sync

    monkeypatch.setattr(sync, "BATCH", 2)
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    for i in range(5):
        sig = Signature((f"k{i}", "gemm"), {f"k{i}": 0.5, "gemm": 0.5})
        wid = a.library.observe(sig, f"uid:1000 python /srv/p{i}.py", f"p{i}", new_run=True, owner_uid=1000)
        a.library.add_policy(
            wid, {"OMP_NUM_THREADS": "4"}, "validated", 1.2, (1.1, 1.3), {"source": "runs"}, GPU
        )
    while a.status().outbox:
        a.run_once()
    b.cfg = FleetConfig(url=fresh.url, node="b", pull_every_s=60, connect_timeout_s=2.0, sslmode="disable")
    b.start()
    try:
        deadline = time.monotonic() + 20
        while len(b.library.list()) < 5:
            assert time.monotonic() < deadline, f"b knows {len(b.library.list())} of 5 after 20 s"
            time.sleep(0.1)
    finally:
        b.stop()
    assert not b.behind and b.status().pulled == 5


def test_a_pin_from_the_fleet_never_overrides_this_nodes_admin_nor_pins_its_own_policies(
    fresh: Postgres, tmp_path: Path
) -> None:
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    theirs = a.library.add_policy(wid, {"OMP_NUM_THREADS": "4"}, "validated", 1.3, (1.1, 1.5),
                                  {"source": "runs"}, GPU)  # fmt: skip
    a.run_once()
    b.run_once()
    wb = b.library.by_launch_key(CMD)
    assert wb is not None
    mine = b.library.add_policy(wb.id, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.1, (1.05, 1.2),
                                {"source": "tune", "scope_uid": 1000}, GPU)  # fmt: skip
    b.library.pin(mine.id, "root", push=False)  # B's own admin chose
    a.library.pin(theirs.id, "root")
    a.run_once()
    b.run_once()
    pols = {p.id: p for p in b.library.get(wb.id).policies}
    assert pols[mine.id].status == "pinned" and pols[mine.id].pinned_by == "root"  # B's admin stands
    copy = next(p for p in pols.values() if p.id != mine.id)
    assert copy.status == "validated"
    # a pin naming B's own (user-scoped) policy as its origin pins nothing of B's
    b.library.unpin(mine.id, push=False)
    fresh.sql(
        "INSERT INTO fleet_events (kind, node, origin, gpu_model, payload) VALUES ('pin', 'x', %s, %s, %s)",
        [f"b:{mine.id}", GPU, json.dumps({"pinned_by": "evil"})],
    )
    b.run_once()
    assert b.library.get_policy(mine.id).status == "validated"


def test_what_a_policy_was_learned_with_reaches_the_other_nodes(fresh: Postgres, tmp_path: Path) -> None:
    """A policy's evidence says which frameworks its runs had mapped; a node that gets it from the
    fleet keeps them (plain names and versions only) and says where its own runs of the workload
    ran other versions. The difference is shown, not a reason to refuse: this node confirms the
    policy on its own first runs anyway."""
    a, b = node(tmp_path, "a", fresh.url), node(tmp_path, "b", fresh.url)
    b.jobs_frameworks = lambda wid: {"torch": "2.10.0", "numpy": "2.3.1"}
    wid = a.library.observe(TRAIN, KEY, "train", new_run=True, owner_uid=1000, command_key=CMD)
    learned = {"torch": "2.11.0+cu130", "numpy": "2.3.1", "$(id)": "1", "triton": "3.5; rm -rf /"}
    a.library.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, "validated", 1.4, (1.2, 1.6),
                         {"source": "live", "frameworks": learned}, GPU, "580.159.04")  # fmt: skip
    assert a.run_once() == (1, 0, 0) and b.run_once() == (0, 1, 0)
    w = b.library.by_launch_key(CMD)
    assert w is not None
    (got,) = b.library.get(w.id).policies
    assert got.evidence["frameworks"] == {"numpy": "2.3.1", "torch": "2.11.0+cu130"}
    assert got.evidence["frameworks_differ"] == "torch 2.11.0+cu130 there, 2.10.0 here"
