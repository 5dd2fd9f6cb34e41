from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitmd.analysis.fingerprint import Signature
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.store.db import Store
from gitmd.store.library import Library

TRAIN = Signature(
    ("gemm", "elementwise:GeluCUDAKernelImpl", "gemm", "reduce_kernel"),
    {"gemm": 0.8, "elementwise:GeluCUDAKernelImpl": 0.1, "reduce_kernel": 0.1},
)
OTHER = Signature(("softmax_warp_forward", "nll_loss"), {"softmax_warp_forward": 0.5, "nll_loss": 0.5})


def lib(tmp_path: Path, name: str = "g.db") -> Library:
    return Library(Store(tmp_path / name))


def test_observe_matches_fuzzily_and_links_launch_keys(tmp_path: Path) -> None:
    lb = lib(tmp_path)
    a = lb.observe(TRAIN, "python:/w/train.py", "train", new_run=True)
    shifted = Signature(
        TRAIN.sequence, {"gemm": 0.85, "elementwise:GeluCUDAKernelImpl": 0.08, "reduce_kernel": 0.07}
    )
    assert lb.observe(shifted, "python:/w/train.py", "train", new_run=True) == a
    b = lb.observe(OTHER, "python:/w/eval.py", "eval", new_run=True)
    assert b != a
    w = lb.get(a)
    # a key linked by an observed run is not listed (nor exported, nor sent to the fleet): it may
    # resolve no launch by itself (gitmd/loop/launch.py); its command keys are
    assert w.run_count == 2 and w.launch_keys == ()
    assert lb.by_launch_key("python:/w/train.py").id == a  # type: ignore[union-attr]
    assert lb.by_launch_key("nope") is None
    assert {x.id for x in lb.list()} == {a, b}


def test_active_policy_pin_unpin_revert(tmp_path: Path) -> None:
    lb = lib(tmp_path)
    wid = lb.observe(TRAIN, "k", "t", True)
    p1 = lb.add_policy(
        wid, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, "validated", speedup=1.4, ci=(1.3, 1.5)
    )
    p2 = lb.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "validated", speedup=1.05)
    assert lb.get(wid).active_policy.id == p1.id  # type: ignore[union-attr]
    assert lb.pin(p2.id, "root").status == "pinned"
    assert lb.get(wid).active_policy.id == p2.id  # type: ignore[union-attr]
    lb.pin(p1.id, "root")
    assert {p.id: p.status for p in lb.get(wid).policies} == {p1.id: "pinned", p2.id: "validated"}
    assert lb.unpin(p1.id).status == "validated"
    lb.revert(p1.id)
    with pytest.raises(InvalidArgumentError, match="reverted"):
        lb.pin(p1.id, "root")
    assert lb.get(wid).active_policy.id == p2.id  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        lb.pin(999, "root")
    with pytest.raises(InvalidArgumentError):
        lb.add_policy(wid, {"bad name": "1"}, "validated")


def test_export_import_round_trip(tmp_path: Path) -> None:
    src = lib(tmp_path, "a.db")
    ck = "python:/w/train.py #command:0123456789abcdef"  # what a fingerprinted run links
    wid = src.observe(TRAIN, "python:/w/train.py", "train", True, command_key=ck)
    src.add_policy(wid, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, "pinned", speedup=2.0)
    doc = json.dumps(src.export()).encode()
    dst = lib(tmp_path, "b.db")
    assert dst.import_(doc) == (1, 1)
    assert dst.import_(doc) == (0, 0)  # idempotent
    w = dst.get(wid)
    # the script's key its runs linked is not exported (it resolves no launch by itself)
    assert w.launch_keys == (ck,) and w.active_policy.env == {  # type: ignore[union-attr]
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"
    }
    w, resolves = dst.at_launch(ck, "")  # a stated key
    assert resolves and w.id == wid  # type: ignore[union-attr]


def test_import_never_silently_replaces_a_pinned_policy(tmp_path: Path) -> None:
    local = lib(tmp_path, "a.db")
    wid = local.observe(TRAIN, "k", "t", True)
    local.add_policy(wid, {"A": "1"}, "pinned")
    other = lib(tmp_path, "b.db")
    other.observe(TRAIN, "k", "t", True)
    other.add_policy(wid, {"A": "2"}, "pinned")
    before = json.dumps(local.export()["workloads"])
    with pytest.raises(InvalidArgumentError, match="replace pinned"):
        local.import_(json.dumps(other.export()).encode())
    assert json.dumps(local.export()["workloads"]) == before


def good_doc() -> dict:
    return {
        "format": "gitm-library",
        "version": 1,
        "workloads": [
            {
                "id": "0123456789ab",
                "name": "x",
                "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
                "first_seen_ns": 1,
                "last_seen_ns": 2,
                "run_count": 3,
                "launch_keys": ["k"],
                "policies": [{"env": {"A": "1"}, "status": "validated", "speedup": 1.1}],
            }
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(workloads={}), "workloads"),
        (lambda d: d["workloads"][0].update(id="../../etc"), "12 hex"),
        (lambda d: d["workloads"][0].update(run_count="3"), "run_count"),
        (lambda d: d["workloads"][0].update(run_count=True), "boolean"),
        (lambda d: d["workloads"][0]["policies"][0].update(status="golden"), "status"),
        (lambda d: d["workloads"][0]["policies"][0].update(env={"LD_PRELOAD": 5}), "LD_PRELOAD"),
        (lambda d: d["workloads"][0]["policies"][0].update(env={"a b": "1"}), "environment variable"),
        (lambda d: d["workloads"][0]["policies"][0].update(speedup=float("inf")), "Infinity is not allowed"),
        (lambda d: d["workloads"].append(dict(d["workloads"][0])), "once"),
        (lambda d: d["workloads"][0]["signature"].update(sequence=[1, 2]), "sequence"),
        (lambda d: d["workloads"][0]["policies"][0].update(live=[{"lever": "power_limit"}]), "live"),
        (
            lambda d: d["workloads"][0]["policies"][0].update(
                live=[{"lever": "stream_priority", "setting": {"stream": 3}}]
            ),
            "takes priority",
        ),
        (
            lambda d: d["workloads"][0]["policies"][0].update(
                live=[{"lever": "sched_priority", "setting": {"nice": "-5"}}]
            ),
            "integer",
        ),
        (lambda d: d["workloads"][0]["policies"][0].update(live={"lever": "cpu_affinity"}), "live"),
    ],
)
def test_bad_imports_are_refused_and_change_nothing(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    lb = lib(tmp_path)
    d = good_doc()
    mutate(d)
    with pytest.raises(InvalidArgumentError, match=message):
        lb.import_(json.dumps(d).encode())
    assert lb.list() == []


def test_hostile_documents(tmp_path: Path) -> None:
    lb = lib(tmp_path)
    for raw in (
        b"",
        b"[]",
        b"{",
        b"\xff\xfe",
        b'{"format": "gitm-library", "version": 1, "workloads": NaN}',
        b"x" * (64 << 20 + 1),
    ):
        with pytest.raises(InvalidArgumentError):
            lb.import_(raw)
    assert lb.list() == []
    assert lb.import_(json.dumps(good_doc()).encode()) == (1, 1)


def test_live_policies_round_trip_and_apply_beside_an_environment_policy(tmp_path: Path) -> None:
    src = lib(tmp_path, "a.db")
    wid = src.observe(TRAIN, "python:/w/train.py", "train", True)
    src.add_policy(wid, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, "validated", speedup=5.0)
    live = src.add_policy(
        wid, {}, "validated", speedup=3.0, live=[{"lever": "stream_priority", "setting": {"priority": -5}}]
    )
    w = src.get(wid)
    assert w.active_policy_for(0).env == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}  # type: ignore[union-attr]
    assert w.live_policy_for(0) == live  # both apply: they act on different things
    dst = lib(tmp_path, "b.db")
    assert dst.import_(json.dumps(src.export()).encode()) == (1, 2)
    assert dst.get(wid).live_policy_for(7).live == (
        {"lever": "stream_priority", "setting": {"priority": -5}},
    )  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError):
        src.add_policy(wid, {}, "validated", live=[{"lever": "clocks"}])
    pinned = src.add_policy(wid, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "pinned")
    assert (
        src.get(wid).active_policy_for(0) == pinned and src.get(wid).live_policy_for(0) is None
    )  # a pin is what runs


def test_a_policy_may_set_only_the_catalogs_own_variables(tmp_path: Path) -> None:
    """An imported (or stored) policy that sets BASH_ENV, NODE_OPTIONS, GLIBC_TUNABLES… ran a
    payload as the job's user (hardening issue): with the catalog's variables as the allowlist, as
    the daemon wires it, they are refused and nothing is written; the levers' own pass."""
    import json

    import pytest

    from gitmd.errors import InvalidArgumentError
    from gitmd.levers.registry import env_variables
    from gitmd.store.db import Store
    from gitmd.store.library import Library

    lib = Library(Store(tmp_path / "l.db"), allowed_env=env_variables())
    assert {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "PYTORCH_CUDA_ALLOC_CONF"} <= env_variables()
    for name in ("BASH_ENV", "NODE_OPTIONS", "GLIBC_TUNABLES", "NCCL_NET_PLUGIN", "PYTHONUSERBASE",
                 "CUDA_VISIBLE_DEVICES"):  # fmt: skip
        doc = {
            "format": "gitm-library",
            "version": 1,
            "workloads": [
                {
                    "id": "00c0ffee0001",
                    "name": "x",
                    "signature": {"sequence": ["k"], "shares": {"k": 1.0}},
                    "first_seen_ns": 1,
                    "last_seen_ns": 1,
                    "run_count": 1,
                    "launch_keys": ["x"],
                    "policies": [{"env": {name: "1"}, "status": "validated"}],
                }
            ],
        }
        with pytest.raises(InvalidArgumentError, match=name):
            lib.import_(json.dumps(doc).encode())
        assert lib.list() == []
        doc["workloads"][0]["policies"][0]["env"] = {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}  # type: ignore[index]
    assert lib.import_(json.dumps(doc).encode()) == (1, 1)


def test_names_are_matched_whole_not_up_to_a_trailing_newline() -> None:
    import pytest

    from gitmd.errors import InvalidArgumentError
    from gitmd.store.library import check_env

    with pytest.raises(InvalidArgumentError, match="environment variable name"):
        check_env({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE\n": "1"}, "env")


def test_a_deeply_nested_import_is_refused_clearly() -> None:
    """Hardening issue, item 8: deeply nested JSON made ImportLibrary answer UNKNOWN (a recursion
    error escaped); it is an invalid document, said so."""
    import pytest

    from gitmd.errors import InvalidArgumentError
    from gitmd.store.library_document import validate_document

    with pytest.raises(InvalidArgumentError, match="nested too deeply"):
        validate_document(b"[" * 100_000 + b"]" * 100_000)


def test_an_integer_beyond_64_bits_is_refused_clearly(tmp_path: Path) -> None:
    """Hardening issue, item 8: created_ns = 2**70 in an import answered UNKNOWN (SQLite could not
    store it)."""
    import json

    import pytest

    from gitmd.errors import InvalidArgumentError
    from gitmd.store.db import Store
    from gitmd.store.library import Library

    lib = Library(Store(tmp_path / "g.db"))
    doc = lib.export()
    doc["workloads"] = [{
        "id": "00c0ffee0a0a", "name": "w", "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
        "first_seen_ns": 1, "last_seen_ns": 2 ** 70, "run_count": 1, "launch_keys": [], "policies": [],
    }]  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="out of range"):
        lib.import_(json.dumps(doc).encode())
    assert lib.list() == []  # nothing changed


def test_one_users_runs_never_land_on_another_users_workload(tmp_path: Path) -> None:
    """Hardening issue, item 2: launch keys were free text shared by every user, and windows were
    matched against every workload, so a user could claim another's workload and take part in the
    trials that decide its policy. Workloads now belong to the user whose jobs made them; an
    admin's import (no owner) is shared."""
    lb = lib(tmp_path)
    a = lb.observe(TRAIN, "uid:1000 python /w/train.py", "train", new_run=True, owner_uid=1000)
    b = lb.observe(TRAIN, "uid:2000 python /w/train.py", "train", new_run=True, owner_uid=2000)
    assert a != b  # the same program, two users: two workloads
    assert lb.observe(TRAIN, "uid:2000 python /w/train.py", "train", True, owner_uid=2000) == b
    assert lb.observe(TRAIN, "uid:1000 python /w/train.py", "train", True, owner_uid=1000) == a
    assert lb.by_launch_key("uid:1000 python /w/train.py").id == a  # type: ignore[union-attr]
    assert lb.by_launch_key("uid:2000 python /w/train.py").id == b  # type: ignore[union-attr]
    shared = lb.observe(OTHER, "", "eval", new_run=True, owner_uid=None)  # as an import makes them
    assert lb.observe(OTHER, "uid:3000 python /w/eval.py", "eval", True, owner_uid=3000) == shared


def test_the_ownership_migration_scopes_existing_keys_by_their_users(tmp_path: Path) -> None:
    """Migration 0019 on a store written before it: each workload's owner is the user of its first
    job (none: no one, never everyone), each job's key is scoped by its user, and each launch key by
    its workload's owner: another user's use of the same text no longer points at it."""
    from gitmd.store.db import bundled_migrations

    path = tmp_path / "old.db"
    before = [m for m in bundled_migrations() if m.version < 19]
    s = Store(path, before)
    s.conn.execute(
        "INSERT INTO workloads (id, name, signature, first_seen_ns, last_seen_ns) "
        "VALUES ('w1', 't', '{}', 1, 1), ('w2', 'pruned', '{}', 1, 1)"
    )
    for jid, uid, t in (("j1", 1000, 1), ("j2", 2000, 2)):
        s.conn.execute(
            "INSERT INTO jobs (id, name, command, cwd, uid, gid, state, created_ns, launch_key, workload_id) "
            "VALUES (?, 't', '[]', '/', ?, ?, 'exited', ?, 'python /w/t.py', 'w1')",
            [jid, uid, uid, t],
        )
    for key in ("python /w/t.py", "orphan"):
        s.conn.execute("INSERT INTO launch_keys (key, workload_id, last_seen_ns) VALUES (?, 'w1', 1)", [key])
    s.close()
    s = Store(path)
    assert s.conn.execute("SELECT owner_uid FROM workloads WHERE id = 'w1'").fetchone()[0] == 1000
    assert s.conn.execute("SELECT owner_uid FROM workloads WHERE id = 'w2'").fetchone()[0] == -1  # no one's
    keys = {r[0]: r[1] for r in s.conn.execute("SELECT id, launch_key FROM jobs")}
    assert keys == {"j1": "uid:1000 python /w/t.py", "j2": "uid:2000 python /w/t.py"}
    # the key stays with the workload's owner only; the orphan is the owner's too (it named w1)
    assert sorted(r[0] for r in s.conn.execute("SELECT key FROM launch_keys")) == [
        "uid:1000 orphan",
        "uid:1000 python /w/t.py",
    ]
    s.close()


def test_a_run_whose_fingerprint_matches_nothing_joins_the_workload_its_command_line_ran_as(
    tmp_path: Path,
) -> None:
    """The same command line, its step seen differently, stays on its workload (one JAX program
    made two, H200 2026-12-04). The same script with other arguments does not join by the script
    alone: timm's benchmark.py runs another model by --model, and such a run joined the workload of
    the model before it."""
    from gitmd.jobs.launch_key import command_key

    lb = lib(tmp_path)
    key = "uid:1000 python /w/benchmark.py"
    resnet = command_key(key, ["python", "benchmark.py", "--model", "resnet18"], "/w")
    vit = command_key(key, ["python", "benchmark.py", "--model", "vit"], "/w")
    a = lb.observe(TRAIN, key, "b", new_run=True, owner_uid=1000, command_key=resnet)
    assert lb.observe(OTHER, key, "b", new_run=True, owner_uid=1000, command_key=resnet) == a
    assert lb.get(a).run_count == 2
    # another model through the same script matches nothing: a workload of its own
    b = lb.observe(OTHER, key, "b", new_run=True, owner_uid=1000, command_key=vit)
    assert b != a
    assert lb.by_launch_key(vit).id == b and lb.by_launch_key(resnet).id == a  # type: ignore[union-attr]
    # a fingerprint that matches decides over the keys: they move to the workload it matched
    assert lb.observe(OTHER, key, "b", new_run=True, owner_uid=1000, command_key=resnet) == b
    assert lb.by_launch_key(key).id == b  # type: ignore[union-attr]


def test_only_a_key_that_names_one_program_of_the_users_own_joins_a_workload(tmp_path: Path) -> None:
    """A key that names only a shell or interpreter (`bash a.sh` and `bash b.sh` are both `bash`)
    names every program it runs alike; a shared workload (an import, the fleet's) is others' too;
    a caller of no known user has no workload of its own: none of them joins by the key."""
    third = Signature(("sgemm",), {"sgemm": 1.0})
    lb = lib(tmp_path)
    shell = lb.observe(TRAIN, "uid:1000 bash", "a", new_run=True, owner_uid=1000)
    assert lb.observe(OTHER, "uid:1000 bash", "b", new_run=True, owner_uid=1000) != shell
    assert lb.by_launch_key("uid:1000 bash") is None  # nor does it resolve at a launch
    shared = lb.observe(TRAIN, "uid:1000 python /w/t.py", "t", new_run=True, owner_uid=None)  # as an import
    mine = lb.observe(OTHER, "uid:1000 python /w/t.py", "t", new_run=True, owner_uid=1000)
    assert mine != shared
    nobody = lb.observe(third, "python /w/x.py", "x", new_run=True, owner_uid=None)
    assert (
        lb.observe(
            Signature(("softmax",), {"softmax": 1.0}), "python /w/x.py", "x", new_run=True, owner_uid=None
        )
        != nobody
    )


def test_which_keys_name_one_program() -> None:
    from gitmd.jobs.launch_key import launch_key, names_program, owned

    assert names_program(owned(1000, launch_key(["python3", "train.py"], "/w")))
    assert names_program(launch_key(["python", "-m", "torch.distributed.run", "x.py"], "/w"))
    assert not names_program(launch_key(["python", "-m", "torch.distributed.run", "x"], "/w"))
    assert names_program(launch_key(["python", "-c", "print(1)"], "/w"))
    assert names_program(owned(1000, launch_key(["bash", "run.sh"], "/w")))
    assert not names_program(owned(1000, launch_key(["bash"], "/w")))
    assert not names_program(launch_key(["python3"], "/w"))  # the interpreter alone
    assert not names_program(launch_key(["/opt/bin/trainer", "--cfg", "a"], "/w"))


def test_what_may_resolve_a_launch_is_kept_apart_from_what_a_run_linked(tmp_path: Path) -> None:
    """Review of the launch-key change: a key the fleet or an import stated stays stated only for
    its workload; a script's key linked by observed runs is neither listed nor used to pick the
    workload a fleet policy belongs to; command keys are kept to the newest MAX_COMMAND_KEYS."""
    from gitmd.jobs.launch_key import command_key
    from gitmd.store.launch_keys import MAX_COMMAND_KEYS

    lb = lib(tmp_path)
    key = "uid:1000 python /w/bench.py"
    fleet = lb.adopt(TRAIN, "bench", [key])  # stated for TRAIN's workload
    w, resolves = lb.at_launch(key, "")
    assert resolves and w.id == fleet  # type: ignore[union-attr]
    other = lb.observe(OTHER, key, "bench", new_run=True, owner_uid=1000)  # a fingerprint moves it
    assert other != fleet and lb.by_launch_key(key).id == other  # type: ignore[union-attr]
    assert lb.at_launch(key, "")[1] is False  # nobody stated it for OTHER's workload
    # a fleet policy for a third program through the same script: not put on OTHER's workload by
    # the key its runs linked
    third = Signature(("sgemm",), {"sgemm": 1.0})
    assert lb.adopt(third, "bench", [key]) not in (other, fleet)
    # a job whose arguments change every run: its newest command keys only
    for seed in range(MAX_COMMAND_KEYS + 5):
        ck = command_key(key, ["python", "bench.py", "--seed", str(seed)], "/w")
        lb.observe(OTHER, key, "bench", new_run=True, owner_uid=1000, command_key=ck)
    keys = lb.get(other).launch_keys
    assert len([k for k in keys if "#command:" in k]) == MAX_COMMAND_KEYS
    assert command_key(key, ["python", "bench.py", "--seed", str(MAX_COMMAND_KEYS + 4)], "/w") in keys


def test_the_command_key_cap_keeps_the_lines_run_here_beside_the_fleets(tmp_path: Path) -> None:
    """Second review: command keys the fleet stated counted in the cap, so the lines run here before
    a fleet policy came were deleted at the next run."""
    from gitmd.jobs.launch_key import command_key
    from gitmd.store.launch_keys import MAX_COMMAND_KEYS

    lb = lib(tmp_path)
    key = "uid:1000 python /w/bench.py"
    mine = [command_key(key, ["python", "bench.py", "--seed", str(i)], "/w") for i in range(6)]
    wid = lb.observe(TRAIN, key, "bench", new_run=True, owner_uid=1000, command_key=mine[0])
    for ck in mine[1:5]:
        lb.observe(TRAIN, key, "bench", new_run=True, owner_uid=1000, command_key=ck)
    theirs = [
        command_key(key, ["python", "bench.py", str(i)], "/elsewhere") for i in range(MAX_COMMAND_KEYS + 4)
    ]
    assert lb.adopt(TRAIN, "bench", theirs) == wid  # newer than the lines run here
    assert lb.observe(TRAIN, key, "bench", new_run=True, owner_uid=1000, command_key=mine[5]) == wid
    keys = set(lb.get(wid).launch_keys)
    assert set(mine) <= keys and set(theirs) <= keys
