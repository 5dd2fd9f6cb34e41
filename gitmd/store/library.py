"""The library: workloads by fingerprint, the launch keys seen for them, and their policies.

A recurring job gets its policy at registration: the launch key finds the workload, and the
workload's active policy (pinned, else the validated one with the best evidence: this node's own
before the fleet's, then the higher lower bound of its interval; Policy.rank) goes into the launch
plan. Export and import use a versioned JSON document (gitmd.store.library_document); an
import is validated completely before anything is written, and never silently replaces a pinned
policy. The records themselves are in gitmd.store.library_model.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from gitmd.analysis.fingerprint import MATCH_THRESHOLD, Signature, heavy_families, similarity
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.experiments.equivalence import Contract
from gitmd.jobs.launch_key import generic, names_program
from gitmd.store import launch_keys as links
from gitmd.store.db import Store
from gitmd.store.library_document import (
    FORBIDDEN_ENV,
    FORMAT,
    LIVE_POLICY_LEVERS,
    MAX_ENV,
    MAX_IMPORT_BYTES,
    MAX_KEYS_PER_WORKLOAD,
    MAX_POLICIES_PER_WORKLOAD,
    MAX_WORKLOADS,
    VERSION,
    check_env,
    check_live,
    export_document,
    validate_document,
)
from gitmd.store.library_model import (
    STATUSES,
    Policy,
    Workload,
    policy_from_row,
    signature_from_json,
    signature_json,
)

__all__ = [
    "FORBIDDEN_ENV",
    "FORMAT",
    "LIVE_POLICY_LEVERS",
    "MAX_ENV",
    "MAX_IMPORT_BYTES",
    "MAX_KEYS_PER_WORKLOAD",
    "MAX_POLICIES_PER_WORKLOAD",
    "MAX_WORKLOADS",
    "STATUSES",
    "VERSION",
    "Library",
    "Policy",
    "Workload",
    "check_env",
    "check_live",
    "export_document",
    "validate_document",
]


class Library:
    def __init__(self, store: Store, allowed_env: frozenset[str] | None = None) -> None:
        """``allowed_env``: the only variables a policy may set — the launch levers' own
        (gitmd.levers.registry.env_variables, wired by the daemon); None: any not forbidden."""
        self.store = store
        self.allowed_env = allowed_env
        # [fleet] on: a policy promoted or reverted here is queued for the fleet store (fleet_outbox)
        self.fleet_outbox = False

    # -- reading -------------------------------------------------------------------------------
    def _workload(self, db: Any, row: dict[str, Any]) -> Workload:
        keys = tuple(links.resolving(db.conn, row["id"]))
        pols = tuple(
            policy_from_row(r)
            for r in db.query("SELECT * FROM policies WHERE workload_id = ? ORDER BY id", [row["id"]])
        )
        return Workload(
            row["id"],
            row["name"],
            signature_from_json(row["signature"]),
            row["first_seen_ns"],
            row["last_seen_ns"],
            row["run_count"],
            keys,
            pols,
        )

    def set_contract(self, workload_id: str, uid: int, contract: Contract) -> None:
        """The contract ``uid``'s later runs of the workload are held to when their launch gives
        none (no checks: cleared). A user's consent covers their own runs only."""
        with self.store.transaction() as db:
            if db.conn.execute("SELECT 1 FROM workloads WHERE id = ?", [workload_id]).fetchone() is None:
                raise NotFoundError(f"no workload {workload_id!r} in the library")
            if contract.checks:
                db.execute(
                    "INSERT INTO workload_contracts (workload_id, uid, contract, set_ns) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (workload_id, uid) DO UPDATE SET contract = excluded.contract, "
                    "set_ns = excluded.set_ns",
                    [workload_id, uid, json.dumps(contract.to_json()), time.time_ns()],
                )
            else:
                db.execute(
                    "DELETE FROM workload_contracts WHERE workload_id = ? AND uid = ?", [workload_id, uid]
                )

    def contract(self, workload_id: str, uid: int) -> tuple[Contract, int]:
        """``uid``'s contract for the workload's runs and when it was set (an empty one and 0: none)."""
        with self.store.reading() as db:
            row = db.conn.execute(
                "SELECT contract, set_ns FROM workload_contracts WHERE workload_id = ? AND uid = ?",
                [workload_id, uid],
            ).fetchone()
        return (Contract.from_json(json.loads(row[0])), int(row[1])) if row else (Contract(), 0)

    def get(self, workload_id: str) -> Workload:
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM workloads WHERE id = ?", [workload_id]))
            if not rows:
                raise NotFoundError(f"no workload {workload_id!r} in the library")
            return self._workload(db, rows[0])

    def get_policy(self, policy_id: int) -> Policy:
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))
        if not rows:
            raise NotFoundError(f"no policy {policy_id}")
        return policy_from_row(rows[0])

    def list(self) -> list[Workload]:
        with self.store.reading() as db:
            return [
                self._workload(db, r) for r in db.query("SELECT * FROM workloads ORDER BY last_seen_ns DESC")
            ]

    def by_launch_key(self, key: str) -> Workload | None:
        """The workload last linked to this launch key, however it was linked (at_launch says
        whether the link may resolve a launch); none for a generic key (`bash`, `srun`)."""
        return self._linked(key, "")[0]

    def at_launch(self, key: str, command_key: str) -> tuple[Workload | None, bool]:
        """For a registration, in one indexed read: the workload its command key names, else the one
        its launch key names, and whether that link may resolve the launch by itself (a command
        key, or a key stated for the workload: launch_keys.RESOLVING). (None, False) for a
        generic key."""
        return self._linked(key, command_key)

    def _linked(self, key: str, command_key: str) -> tuple[Workload | None, bool]:
        if not key or generic(key):
            return None, False
        with self.store.reading() as db:
            # conn.execute, not db.query: this runs on every registration, and sqlite-utils wraps
            # each query in a savepoint
            found = links.lookup(db.conn, [k for k in (command_key, key) if k])
            hit = found.get(command_key) or found.get(key)
            if hit is None:
                return None, False
            return self._workload(db, hit[0]), hit[1]

    # -- learning ------------------------------------------------------------------------------
    def observe(
        self,
        sig: Signature,
        launch_key: str,
        name: str,
        new_run: bool,
        owner_uid: int | None = None,
        command_key: str = "",
    ) -> str:
        """The workload this signature belongs to; links the launch key and the command key.
        Only ``owner_uid``'s workloads and the shared ones (an admin's import) are candidates, and a
        new workload is that user's (migration 0019): one user's runs never feed another's.

        A fingerprint that matches a workload decides. One that matches none joins the workload the
        same command line last ran as (``command_key``: launch_key.command_key), when its launch key
        names one program (a Python script, module or -c code, a shell script of this user's:
        launch_key.names_program) and that workload is this user's own: one program is one workload
        even when a window saw its step differently (a JAX training's runs made two workloads of one
        program, H200 2026-12-04: nothing learned on the first reached the next). The launch key
        alone does not join: one script runs other programs by its arguments (timm's benchmark.py
        --model X is six of the corpus's programs), and a run of one joined the workload of
        another. A shared workload (an import, the fleet's) and a caller of no known user never
        join this way."""
        now = time.time_ns()
        with self.store.transaction() as db:
            best_id = _best_match(db, sig, owner_uid)
            if best_id is None and command_key and owner_uid is not None and names_program(launch_key):
                row = db.execute(
                    "SELECT w.id FROM launch_keys k JOIN workloads w ON w.id = k.workload_id "
                    "WHERE k.key = ? AND w.owner_uid IS ?",
                    [command_key, owner_uid],
                ).fetchone()
                best_id = row[0] if row is not None else None
            if best_id is None:
                best_id = sig.id
                taken = db.execute("SELECT owner_uid FROM workloads WHERE id = ?", [best_id]).fetchone()
                if taken is not None and taken[0] != owner_uid:  # the same program, another user's
                    best_id = hashlib.sha1(f"{owner_uid}:{sig.id}".encode()).hexdigest()[: len(sig.id)]
                db.execute(
                    "INSERT OR IGNORE INTO workloads "
                    "(id, name, signature, first_seen_ns, last_seen_ns, run_count, owner_uid) "
                    "VALUES (?, ?, ?, ?, ?, 0, ?)",
                    [best_id, name, signature_json(sig), now, now, owner_uid],
                )
            db.execute(
                "UPDATE workloads SET last_seen_ns = ?, run_count = run_count + ? WHERE id = ?",
                [now, 1 if new_run else 0, best_id],
            )
            links.link(db, best_id, launch_key, command_key, now)
        return best_id

    def adopt(self, sig: Signature, name: str, launch_keys: Sequence[str]) -> str:
        """The local workload for a policy another node learned (gitmd/fleet/). Its launch keys are
        bound to a user ("uid:1000 ..."); the workload is that user's (shared when its keys name
        no one user): the one of that user's a key of it names here, else that user's or a shared
        one whose fingerprint matches, else a new one. Only that user's keys are linked to it: no
        key of another user ever resolves to it (their runs would take part in its trials)."""
        now = time.time_ns()
        owners = {int(k.split(" ", 1)[0][4:]) for k in launch_keys if _owned_key(k)}
        owner = next(iter(owners)) if len(owners) == 1 else None
        keys = [k for k in launch_keys if owner is None or k.startswith(f"uid:{owner} ")]
        with self.store.transaction() as db:
            wid = None
            for key in keys:
                row = db.execute(
                    "SELECT w.id FROM launch_keys k JOIN workloads w ON w.id = k.workload_id WHERE k.key = ? "
                    f"AND (w.owner_uid IS ? OR w.owner_uid IS NULL) AND {links.RESOLVING}",
                    [key, owner],
                ).fetchone()
                if row is not None:
                    wid = row[0]
                    break
            if wid is None:
                wid = _best_match(db, sig, owner)
            if wid is None:
                wid = hashlib.sha1(f"fleet:{owner}:{sig.id}".encode()).hexdigest()[: len(sig.id)]
                db.execute(
                    "INSERT OR IGNORE INTO workloads "
                    "(id, name, signature, first_seen_ns, last_seen_ns, run_count, owner_uid) "
                    "VALUES (?, ?, ?, ?, ?, 0, ?)",
                    [wid, name, signature_json(sig), now, now, owner],
                )
            for key in keys:
                links.give(db, key, wid, now)
        return wid

    # -- operator actions ----------------------------------------------------------------------
    def _set_status(self, policy_id: int, status: str, pinned_by: str = "", push: bool = True) -> Policy:
        now = time.time_ns()
        with self.store.transaction() as db:
            # a revert, pin or unpin here reaches the fleet (an admin's, or a revert gitmd decided)
            kind = {"reverted": "revert", "pinned": "pin", "validated": "unpin"}[status]
            if push and self.fleet_outbox:
                db.execute(
                    "INSERT INTO fleet_outbox (kind, policy_id, created_ns) VALUES (?, ?, ?)",
                    [kind, policy_id, now],
                )
            rows = list(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))
            if not rows:
                raise NotFoundError(f"no policy {policy_id}")
            p = policy_from_row(rows[0])
            if status == "pinned":
                if p.status == "reverted":
                    raise InvalidArgumentError(f"policy {policy_id} was reverted; it cannot be pinned")
                db.execute(
                    "UPDATE policies SET status = 'validated', updated_ns = ? "
                    "WHERE workload_id = ? AND status = 'pinned' AND id != ?",
                    [now, p.workload_id, policy_id],
                )
            if status == "validated" and p.status != "pinned":
                raise InvalidArgumentError(f"policy {policy_id} is {p.status}, not pinned")
            db.execute(
                "UPDATE policies SET status = ?, updated_ns = ?, pinned_by = ? WHERE id = ?",
                [status, now, pinned_by, policy_id],
            )
            return policy_from_row(next(iter(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))))

    def pin(self, policy_id: int, who: str, push: bool = True) -> Policy:
        return self._set_status(policy_id, "pinned", who, push=push)

    def unpin(self, policy_id: int, push: bool = True) -> Policy:
        return self._set_status(policy_id, "validated", push=push)

    def note(self, policy_id: int, update: Callable[[dict[str, Any]], None]) -> Policy:
        """The policy's evidence changed by ``update`` (in place), in one transaction: what another
        node's confirmation said of it (gitmd/fleet/)."""
        with self.store.transaction() as db:
            row = db.conn.execute("SELECT evidence FROM policies WHERE id = ?", [policy_id]).fetchone()
            if row is None:
                raise NotFoundError(f"no policy {policy_id}")
            evidence = json.loads(row[0])
            update(evidence)
            db.execute(
                "UPDATE policies SET evidence = ?, updated_ns = ? WHERE id = ?",
                [json.dumps(evidence), time.time_ns(), policy_id],
            )
            return policy_from_row(next(iter(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))))

    def confirm(self, policy_id: int, result: dict[str, Any]) -> Policy:
        """This node's own trial of a policy the fleet brought (gitmd/loop/trials.py): ``result``
        ({"held": bool, "suspect": bool, "speedup", "ci", "reason", ...}) kept in its evidence and
        sent to the fleet; one that did not hold here is reverted here (that revert is this node's
        alone: the confirmation tells the others, marked suspect when it made the job slower or
        changed its outputs)."""
        p = self.note(policy_id, lambda e: e.update(confirmed=result))
        if self.fleet_outbox:
            with self.store.transaction() as db:
                db.execute(
                    "INSERT INTO fleet_outbox (kind, policy_id, created_ns) VALUES ('confirm', ?, ?)",
                    [policy_id, time.time_ns()],
                )
        if not result.get("held") and p.status == "validated":
            p = self.revert(policy_id, push=False)
        return p

    def revert(self, policy_id: int, push: bool = True) -> Policy:
        """``push``: a revert gitmd decided or an admin asked for here reaches the fleet; one that came
        from the fleet does not go back to it."""
        return self._set_status(policy_id, "reverted", push=push)

    # -- export / import -----------------------------------------------------------------------
    def export(self) -> dict[str, Any]:
        return export_document(self.list())

    def import_(self, raw: bytes) -> tuple[int, int]:
        """Merge a document; (workloads, policies) added. Raises InvalidArgumentError and changes
        nothing when anything in it is wrong or would silently replace a pinned policy."""
        doc = validate_document(raw, self.allowed_env)
        now = time.time_ns()
        added_w = added_p = 0
        with self.store.transaction() as db:
            conflicts = []
            for w in doc["workloads"]:
                local = {
                    (json.dumps(policy_from_row(r).env, sort_keys=True))
                    for r in db.query(
                        "SELECT * FROM policies WHERE workload_id = ? AND status = 'pinned'", [w["id"]]
                    )
                }
                for p in w["policies"]:
                    if (
                        p["status"] == "pinned"
                        and local
                        and json.dumps(p["env"], sort_keys=True) not in local
                    ):
                        conflicts.append(w["id"])
                for key in w["launch_keys"]:
                    owner = list(db.query("SELECT workload_id FROM launch_keys WHERE key = ?", [key]))
                    if owner and owner[0]["workload_id"] != w["id"]:
                        conflicts.append(f"launch key {key!r} belongs to {owner[0]['workload_id']}")
            if conflicts:
                raise InvalidArgumentError(
                    "import refused, nothing changed: it would replace pinned policies "
                    "or re-point launch keys: " + ", ".join(sorted(set(conflicts))[:20])
                )
            for w in doc["workloads"]:
                exists = list(db.query("SELECT id FROM workloads WHERE id = ?", [w["id"]]))
                if not exists:
                    db.execute(
                        "INSERT INTO workloads (id, name, signature, first_seen_ns, last_seen_ns, run_count) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        [
                            w["id"],
                            w["name"],
                            json.dumps(w["signature"], sort_keys=True),
                            w["first_seen_ns"],
                            w["last_seen_ns"],
                            w["run_count"],
                        ],
                    )
                    added_w += 1
                for key in w["launch_keys"]:
                    links.give(db, key, w["id"], now)
                have = {
                    (json.dumps(policy_from_row(r).env, sort_keys=True), r["status"])
                    for r in db.query("SELECT * FROM policies WHERE workload_id = ?", [w["id"]])
                }
                for p in w["policies"]:
                    if (json.dumps(p["env"], sort_keys=True), p["status"]) in have:
                        continue
                    db.execute(
                        "INSERT INTO policies (workload_id, settings, status, speedup, ci_low, ci_high, "
                        "evidence, gpu_model, driver, created_ns, updated_ns, pinned_by) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                        [
                            w["id"],
                            json.dumps({"env": p["env"], "live": p["live"]}),
                            p["status"],
                            p["speedup"],
                            p["ci_low"],
                            p["ci_high"],
                            json.dumps(p["evidence"]),
                            p["gpu_model"],
                            p["driver"],
                            p["created_ns"],
                            now,
                            p["pinned_by"],
                        ],
                    )
                    added_p += 1
        return added_w, added_p

    def add_policy(
        self,
        workload_id: str,
        env: dict[str, str],
        status: str,
        speedup: float | None = None,
        ci: tuple[float, float] | None = None,
        evidence: dict[str, Any] | None = None,
        gpu_model: str = "",
        driver: str = "",
        live: Sequence[dict[str, Any]] | None = None,
    ) -> Policy:
        """A policy from an experiment (the experiments engine calls this)."""
        check_env(env, "env", self.allowed_env)
        check_live(list(live or []), "live")
        if status not in STATUSES:
            raise InvalidArgumentError(f"status must be one of {STATUSES}")
        now = time.time_ns()
        with self.store.transaction() as db:
            if not list(db.query("SELECT id FROM workloads WHERE id = ?", [workload_id])):
                raise NotFoundError(f"no workload {workload_id!r} in the library")
            cur = db.execute(
                "INSERT INTO policies (workload_id, settings, status, speedup, ci_low, ci_high, evidence, "
                "gpu_model, driver, created_ns, updated_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    workload_id,
                    json.dumps({"env": env, "live": list(live or [])}),
                    status,
                    speedup,
                    ci[0] if ci else None,
                    ci[1] if ci else None,
                    json.dumps(evidence or {}),
                    gpu_model,
                    driver,
                    now,
                    now,
                ],
            )
            from_fleet = (evidence or {}).get("source") == "fleet"
            if self.fleet_outbox and status in ("validated", "pinned") and not from_fleet:
                db.execute(
                    "INSERT INTO fleet_outbox (kind, policy_id, created_ns) VALUES ('policy', ?, ?)",
                    [cur.lastrowid, now],
                )
            return policy_from_row(
                next(iter(db.query("SELECT * FROM policies WHERE id = ?", [cur.lastrowid])))
            )


def _owned_key(key: str) -> bool:
    """A launch key bound to its user ("uid:1000 ..."; gitmd.jobs.launch_key.owned)."""
    head = key.split(" ", 1)[0]
    return head.startswith("uid:") and head[4:].isdigit()


def _best_match(db: Any, sig: Signature, owner_uid: int | None) -> str | None:
    """The workload of ``owner_uid``'s (or a shared one) whose fingerprint is most like ``sig``, if
    any matches (MATCH_THRESHOLD). Compared only with the candidates the family index gives: a
    workload whose heavy families ``sig`` lacks, or that lacks every heavy family of ``sig``, cannot
    match (fingerprint.heavy_families); workloads not indexed yet are compared, then indexed."""
    owner = "(w.owner_uid IS NULL OR w.owner_uid IS ?)"
    # conn.execute, not db.query (sqlite-utils builds a dict a row): this runs for every window's
    # fingerprint and every policy a joining node pulls from the fleet
    rows = db.conn.execute(
        f"SELECT w.id, w.signature FROM workloads w WHERE {owner} AND w.families_indexed = 0", [owner_uid]
    ).fetchall()
    _index(db, rows)
    fams, heavy = sorted(sig.shares), sorted(heavy_families(sig))
    if heavy:
        # from the index to the workloads (CROSS JOIN keeps that order): the planner otherwise
        # walked every workload of the owner, and the heavy families through the primary key
        rows += db.conn.execute(
            "SELECT w.id, w.signature FROM ("
            "SELECT workload_id FROM workload_families INDEXED BY workload_families_heavy "
            f"WHERE heavy = 1 AND family IN ({_marks(fams)}) INTERSECT "
            f"SELECT workload_id FROM workload_families WHERE family IN ({_marks(heavy)})"
            f") c CROSS JOIN workloads w ON w.id = c.workload_id WHERE {owner} AND w.families_indexed = 1",
            [*fams, *heavy, owner_uid],
        ).fetchall()
    best_id, best = None, 0.0
    for wid, text in rows:
        s = similarity(sig, signature_from_json(text))
        if s > best or (s == best and best_id is not None and wid < best_id):  # ties: the lower id
            best_id, best = wid, s
    return best_id if best_id is not None and best >= MATCH_THRESHOLD else None


def _marks(xs: Sequence[object]) -> str:
    return ",".join("?" * len(xs))


def _index(db: Any, rows: list[tuple[str, str]]) -> None:
    """Workloads' families into the index (workload_families), their heavy ones marked."""
    for wid, text in rows:
        sig = signature_from_json(text)
        heavy = heavy_families(sig)
        db.conn.executemany(
            "INSERT OR IGNORE INTO workload_families (family, workload_id, heavy) VALUES (?, ?, ?)",
            [(f, wid, int(f in heavy)) for f in sig.shares],
        )
        db.conn.execute("UPDATE workloads SET families_indexed = 1 WHERE id = ?", [wid])
