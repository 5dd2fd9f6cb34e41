"""Sync with the fleet store: push this node's queued events, pull the others', apply them here.

One round (``run_once``) flushes ``fleet_outbox`` into ``fleet_events`` and pulls the events after
this node's cursor, each applied in the local store or refused with a clear log (a hostile row
changes nothing). Rounds run on their own thread every ``fleet.pull_every_s``, and at once when
``trigger`` is called (a library miss at registration: the next launch gets what the fleet knows).
Nothing here is ever on a registration's path, and a fleet store that is slow or away only makes
rounds fail (counted, logged once per outage) until it is back, when the outbox catches up.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from gitmd.config import FleetConfig
from gitmd.errors import GitmdError, UnavailableError
from gitmd.fleet.schema import MAX_PAYLOAD_BYTES, migrate
from gitmd.jobs.frameworks import plain_frameworks
from gitmd.store import launch_keys
from gitmd.store.library import Library
from gitmd.store.library_document import check_env, check_live
from gitmd.store.library_model import policy_from_row, signature_from_json

log = logging.getLogger(__name__)
BATCH = 500  # events pushed or pulled in one round at most
PUSH_LOCK_ID = 0x6769746E  # pg_advisory_xact_lock key that orders pushes
TRIGGER_EVERY_S = 5.0
CATCH_UP_PAUSE_S = 0.1  # between rounds while a node is behind: at most 5,000 events a second
FLEET_PIN = "fleet: "  # pinned_by of a pin that came from the fleet
MAX_NAME = 256  # an event's node, origin and GPU model at most
MAX_KEYS = 64  # launch keys carried with a policy


LISTING = (
    "WITH first AS (SELECT DISTINCT ON (origin) origin, seq, left(node, %s), left(gpu_model, %s), payload, "
    "created_at FROM fleet_events WHERE kind IN ('policy', 'pin') AND octet_length(payload::text) <= %s "
    "ORDER BY origin, seq), "
    "latest AS (SELECT DISTINCT ON (origin) origin, kind FROM fleet_events "
    "WHERE kind IN ('revert', 'pin', 'unpin') ORDER BY origin, seq DESC) "
    "SELECT f.*, l.kind FROM first f LEFT JOIN latest l USING (origin) ORDER BY f.seq DESC LIMIT %s"
)


def _of(d: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """``d[key]`` when it is a ``kind``, else ``default`` (a row from the fleet store is untrusted)."""
    x = d.get(key)
    return x if isinstance(x, kind) else default


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


class RefusedEvent(ValueError):
    """A pulled event that is not applied here, and why."""


@dataclass(frozen=True)
class SyncStatus:
    cursor: int
    pushed: int
    pulled: int
    refused: int
    errors: int
    last_ok_ns: int
    last_error: str
    outbox: int


def read_password(cfg: FleetConfig) -> str | None:
    """The fleet password: from fleet.password_file (root's alone: 0600, else refused), or libpq's
    own PGPASSWORD / .pgpass when no file is named."""
    if cfg.password_file is None:
        return None
    st = os.stat(cfg.password_file)
    if st.st_mode & 0o077:
        raise GitmdError(f"fleet.password_file {cfg.password_file} may be read by others: chmod 600 it")
    return cfg.password_file.read_text(encoding="utf-8").strip()


class FleetSync:
    def __init__(self, cfg: FleetConfig, library: Library, gpu_model: str, driver: str = "") -> None:
        self.cfg = cfg
        self.library = library
        self.store = library.store
        self.gpu_model = gpu_model
        self.driver = driver
        self.node = cfg.node or socket.gethostname()
        self._conn: Any = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._migrated = False
        self._triggered = -TRIGGER_EVERY_S
        self.behind = False  # the last round's pull was a full batch: more events wait
        library.fleet_outbox = True

    # -- the fleet store ---------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        # a statement that hangs (a locked table, a slow server) ends, and the round with it
        conn = self._open("gitmd", statement_s=self.cfg.connect_timeout_s * 10)
        if not self._migrated:  # once a process (again after a failed round)
            migrate(conn)
            self._migrated = True
        self._conn = conn
        return conn

    def _open(self, application: str, statement_s: float) -> Any:
        """A new connection to the fleet store, with [fleet]'s TLS settings and password, its
        connection attempt bounded by connect_timeout_s and each statement by ``statement_s``."""
        import psycopg  # only with [fleet] on

        kw: dict[str, Any] = {"connect_timeout": max(1, math.ceil(self.cfg.connect_timeout_s))}
        if self.cfg.sslmode:
            kw["sslmode"] = self.cfg.sslmode
        if self.cfg.sslrootcert is not None:
            kw["sslrootcert"] = str(self.cfg.sslrootcert)
        password = read_password(self.cfg)
        if password is not None:
            kw["password"] = password
        kw["options"] = f"-c statement_timeout={int(statement_s * 1000)}"
        return psycopg.connect(self.cfg.url, autocommit=True, application_name=application, **kw)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    # -- one round ---------------------------------------------------------------------------------
    def run_once(self) -> tuple[int, int, int]:
        """Push, then pull. Returns (pushed, pulled, refused); raises nothing: a failure is counted."""
        try:
            conn = self._connect()
            pushed = self._push(conn)
            pulled, refused, self.behind = self._pull(conn)
        except Exception as e:  # the fleet store away, slow, or broken: this node goes on alone
            self._migrated = False
            self._count(errors=1, last_error=f"{type(e).__name__}: {e}"[:500])
            if not self._failing:
                log.warning("fleet: sync failed, this node goes on with its own library: %s", e)
            self._failing = True
            return 0, 0, 0
        finally:
            # one connection a round, closed after it: a fleet of 1,000 nodes holds no 1,000 idle
            # server connections (PostgreSQL's default max_connections is 100)
            self.close()
        if self._failing:
            log.info("fleet: sync works again")
        self._failing = False
        self._count(pushed=pushed, pulled=pulled, refused=refused, last_ok_ns=time.time_ns())
        return pushed, pulled, refused

    def _push(self, conn: Any) -> int:
        with self.store.reading() as db:
            queued = db.conn.execute(
                "SELECT id, kind, policy_id FROM fleet_outbox ORDER BY id LIMIT ?", [BATCH]
            ).fetchall()
        done = []
        with conn.transaction():
            # pushes one at a time across the fleet: a sequence number is given at insert, not at
            # commit, so two pushes committing out of order would let a puller's cursor pass events
            # not yet committed, and skip them for good
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [PUSH_LOCK_ID])
            for oid, kind, policy_id in queued:
                event = self._event(kind, int(policy_id))
                if event is not None:
                    conn.execute(
                        "INSERT INTO fleet_events (kind, node, origin, gpu_model, payload) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        [kind, self.node, event["origin"], self.gpu_model, json.dumps(event["payload"])],
                    )
                done.append(oid)
        if done:
            with self.store.transaction() as db:
                db.conn.executemany("DELETE FROM fleet_outbox WHERE id = ?", [(i,) for i in done])
        return len(done)

    def _event(self, kind: str, policy_id: int) -> dict[str, Any] | None:
        """What the fleet is told of a local policy: where it was learned (its origin); for a
        promotion or a pin, what another node needs to use it (the workload's fingerprint and launch
        keys); for a confirmation, how it held on this node's runs."""
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))
            if not rows:
                return None
            p = policy_from_row(rows[0])
            w = next(iter(db.query("SELECT * FROM workloads WHERE id = ?", [p.workload_id])), None)
            keys = launch_keys.resolving(db.conn, p.workload_id, MAX_KEYS, newest_first=True)
        origin = str(p.evidence.get("origin") or f"{self.node}:{p.id}")
        if kind == "revert":
            return {"origin": origin, "payload": {"reason": "reverted on " + self.node}}
        if kind == "unpin":
            return {"origin": origin, "payload": {"by": p.pinned_by}}
        if kind == "confirm":
            confirmed = p.evidence.get("confirmed")
            return {"origin": origin, "payload": confirmed} if isinstance(confirmed, dict) else None
        if w is None or (p.env == {} and not p.live):
            return None
        if kind == "policy" and (
            p.evidence.get("source") in ("fleet", "tune") or p.evidence.get("scope_uid") is not None
        ):
            # a policy the fleet sent is not sent back; a `gitmctl tune` result is its user's own
            # (scoped to them, from figures they sent) and stays on this node — until an admin pins it
            return None
        payload = {
            "workload": {"name": w["name"], "signature": json.loads(w["signature"]), "launch_keys": keys},
            "env": p.env,
            "live": list(p.live),
            "speedup": p.speedup,
            "ci": [p.ci_low, p.ci_high] if p.ci_low is not None else None,
            "driver": p.driver or self.driver,
            "evidence": p.evidence,
        }
        if kind == "pin":
            payload["pinned_by"] = p.pinned_by
        return {"origin": origin, "payload": payload}

    def _pull(self, conn: Any) -> tuple[int, int, bool]:
        """Applied, refused, and whether more events wait (a full batch: a node joining a fleet with
        a long history runs its rounds back to back until it has caught up)."""
        cursor = self.status().cursor
        rows = conn.execute(
            "SELECT seq, kind, left(node, %s), left(origin, %s), left(gpu_model, %s), "
            "CASE WHEN octet_length(payload::text) <= %s THEN payload::text END, octet_length(payload::text) "
            "FROM fleet_events WHERE seq > %s ORDER BY seq LIMIT %s",
            [MAX_NAME, MAX_NAME, MAX_NAME, MAX_PAYLOAD_BYTES, cursor, BATCH],
        ).fetchall()
        applied = refused = 0
        for seq, kind, node, origin, gpu_model, text, size in rows:
            cursor = seq
            if node == self.node:
                continue  # its own
            try:
                if text is None:
                    raise RefusedEvent(f"payload of {size} bytes (at most {MAX_PAYLOAD_BYTES})")
                self.apply(kind, node, origin, gpu_model, json.loads(text), seq)
                applied += 1
            except Exception as e:  # any row that cannot be applied is refused, never blocks the others
                refused += 1
                log.warning("fleet: event %d from %s (%s) refused, nothing changed: %s", seq, node, origin, e)
        with self.store.transaction() as db:
            db.execute("UPDATE fleet_state SET cursor = ? WHERE id = 1", [cursor])
        return applied, refused, len(rows) == BATCH

    # -- applying what others learned ----------------------------------------------------------------
    # the frameworks this node's own runs of a workload ran (JobRegistry.workload_frameworks; None:
    # not known here), set by the daemon
    jobs_frameworks: Any = None

    def apply(self, kind: str, node: str, origin: str, gpu_model: str, payload: Any, seq: int) -> None:
        if not isinstance(payload, dict):
            raise RefusedEvent("payload is not an object")
        if kind == "revert":
            for pid in self._from(origin, live_only=True):
                self.library.revert(pid, push=False)
                log.info(
                    "fleet: policy %d (learned on %s) reverted: %s", pid, origin, payload.get("reason", "")
                )
            return
        if kind == "confirm":
            self._confirmed(node, origin, payload)
            return
        if kind == "unpin":
            for pid in self._local(origin):
                p = self.library.get_policy(pid)
                if p.status == "pinned" and p.pinned_by.startswith(FLEET_PIN):
                    self.library.unpin(pid, push=False)
                    log.info("fleet: policy %d unpinned (unpinned on %s)", pid, node)
            return
        if kind not in ("policy", "pin"):
            raise RefusedEvent(f"unknown event kind {kind!r}")
        if gpu_model != self.gpu_model:
            raise RefusedEvent(f"learned on {gpu_model!r}, this node has {self.gpu_model!r}")
        have = self._local(origin)
        by = f"{FLEET_PIN}{str(payload.get('pinned_by', ''))[:64]} on {node}"
        if kind == "pin":
            for pid in self._from(origin, live_only=False):  # copies the fleet brought, never one of ours
                if self.library.get_policy(pid).status == "validated":  # one reverted here stays so
                    self._pin(pid, by)
            if have:
                return
        elif have:
            return  # had already (in whatever state: a policy reverted here is not brought back)
        w = payload["workload"]
        keys = w.get("launch_keys", [])
        if (
            not isinstance(keys, list)
            or len(keys) > MAX_KEYS
            or any(not isinstance(k, str) or len(k) > 4096 for k in keys)
        ):
            raise RefusedEvent("bad launch keys")
        speedup, ci = payload.get("speedup"), payload.get("ci")
        if speedup is not None and not (
            isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0
        ):
            raise RefusedEvent(f"bad speedup {speedup!r}")
        if ci is not None and not (
            isinstance(ci, list)
            and len(ci) == 2
            and all(isinstance(x, (int, float)) and math.isfinite(x) for x in ci)
        ):
            raise RefusedEvent(f"bad interval {ci!r}")
        env, live = payload["env"], payload.get("live", [])
        # the catalog's variables and live levers only, before anything
        check_env(env, "env", self.library.allowed_env)
        check_live(live, "live")
        if len(live) > 1 or (env and live):
            # one change, as a trial here learns it: this node confirms it by one trial of it
            raise RefusedEvent("a policy from the fleet holds one change (an environment or one live lever)")
        sig = signature_from_json(json.dumps(w["signature"]))
        name = str(w.get("name", ""))[:256]
        wid = self.library.adopt(sig, name, keys)
        driver = str(payload.get("driver", ""))[:64]
        evidence: dict[str, Any] = {
            "source": "fleet", "node": node, "origin": origin, "fleet_seq": seq, "driver": driver
        }  # fmt: skip
        if driver and self.driver and driver.split(".")[0] != self.driver.split(".")[0]:
            evidence["driver_differs"] = f"learned with driver {driver}, this node has {self.driver}"
        # what it was learned with: shown, never a reason to refuse it (the rule: this node confirms
        # it on its own first runs, which is where a difference that matters shows)
        theirs = plain_frameworks((payload.get("evidence") or {}).get("frameworks"))
        if theirs:
            evidence["frameworks"] = theirs
            differs = frameworks_differ(theirs, self.jobs_frameworks(wid) if self.jobs_frameworks else {})
            if differs:
                evidence["frameworks_differ"] = differs
        p = self.library.add_policy(
            wid, env, "validated", speedup, tuple(ci) if ci else None, evidence, gpu_model, driver, live=live
        )
        if kind == "pin":
            self._pin(p.id, by)
        log.info("fleet: a policy learned on %s for %s (%s) is known here now", node, name or wid, origin)

    def _pin(self, pid: int, by: str) -> None:
        """A copy from the fleet pinned as an admin elsewhere pinned it, unless this node's own admin
        has pinned a policy of that workload (theirs stands: the copy stays validated)."""
        p = self.library.get_policy(pid)
        mine = [
            q for q in self.library.get(p.workload_id).policies
            if q.status == "pinned" and not q.pinned_by.startswith(FLEET_PIN)
        ]  # fmt: skip
        if mine:
            log.info(
                "fleet: policy %d not pinned (%s): this node's admin pinned policy %d", pid, by, mine[0].id
            )
            return
        self.library.pin(pid, by, push=False)
        log.info("fleet: policy %d pinned (%s)", pid, by)

    def _confirmed(self, node: str, origin: str, payload: dict[str, Any]) -> None:
        """Another node's trial of a policy it had from the fleet: kept with this node's copy (or
        with the policy itself, where this node learned it); suspect there (a slower job or changed
        outputs) keeps a copy this node has not confirmed itself from being applied here. The mark is
        lifted when the node that raised it later finds the policy held, or when at least two nodes
        found it held and more held it than found it suspect: one node's slower runs (its own
        co-tenants, its noise) do not keep a policy the rest of the fleet measured away for good."""
        held, suspect = bool(payload.get("held")), bool(payload.get("suspect"))
        outcome = {
            "held": held,
            "suspect": suspect,
            "speedup": _number(payload.get("speedup")),
            "reason": str(payload.get("reason", ""))[:300],
        }

        def update(e: dict[str, Any]) -> None:
            nodes = e.setdefault("nodes", {})
            if isinstance(nodes, dict) and (node in nodes or len(nodes) < MAX_KEYS):
                nodes[node[:MAX_NAME]] = outcome
            if suspect and e.get("source") == "fleet" and "confirmed" not in e:
                e["suspect"] = {"node": node[:MAX_NAME], "reason": outcome["reason"]}
            raised = e.get("suspect")
            if held and isinstance(raised, dict) and isinstance(nodes, dict):
                seen = [o for o in nodes.values() if isinstance(o, dict)]
                held_on = sum(1 for o in seen if o.get("held"))
                suspect_on = sum(1 for o in seen if o.get("suspect"))
                own = raised.get("node") == node[:MAX_NAME] and suspect_on == 0  # it was the only one
                if own or (held_on >= 2 and held_on > suspect_on):
                    e["suspect_cleared"] = {
                        "by": node[:MAX_NAME], "held_on": held_on, "suspect_on": suspect_on, "was": raised
                    }  # fmt: skip
                    del e["suspect"]

        for pid in self._local(origin):
            self.library.note(pid, update)
            if suspect:
                log.warning("fleet: policy %d is suspect on %s: %s", pid, node, outcome["reason"])

    def _local(self, origin: str) -> list[int]:
        """The policies here that ``origin`` names: the copies the fleet brought, or this node's own
        policy when it was learned here ("<this node>:<id>")."""
        got = self._from(origin, live_only=False)
        mine, _, pid = origin.rpartition(":")
        if mine == self.node and pid.isascii() and pid.isdigit() and len(pid) <= 18:
            with self.store.reading() as db:
                row = db.conn.execute(
                    "SELECT id FROM policies WHERE id = ? AND json_extract(evidence, '$.source') "
                    "IS NOT 'fleet'",
                    [int(pid)],
                ).fetchone()
            if row is not None:
                got.append(int(row[0]))
        return got

    def _from(self, origin: str, live_only: bool) -> list[int]:
        """Policies the fleet brought here from ``origin`` (``live_only``: those still in force and
        not pinned here: a fleet revert never touches what this node learned itself or what this
        node's admin pinned; a pin that came from the fleet, it does)."""
        state = "AND status != 'reverted' AND (status != 'pinned' OR pinned_by LIKE 'fleet: %')"
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT id FROM policies WHERE json_extract(evidence, '$.source') = 'fleet' "
                f"AND json_extract(evidence, '$.origin') = ? {state if live_only else ''}",
                [origin],
            ).fetchall()
        return [int(r[0]) for r in rows]

    # -- what the fleet knows (gitmctl library list --fleet) -------------------------------------------
    def listing(self, limit: int) -> list[dict[str, Any]]:
        """The fleet store's newest ``limit`` policies, each with its state across the fleet (its
        latest revert, pin or unpin) and each node's confirmation, read now from the server (on its
        own connection, a statement bounded by connect_timeout_s). Rows are read as untrusted: a
        value of the wrong type is left out, strings are cut. Raises UnavailableError when the fleet
        store cannot be reached."""
        import psycopg

        try:
            with self._open("gitmctl", statement_s=self.cfg.connect_timeout_s) as conn:
                rows = conn.execute(LISTING, [MAX_NAME, MAX_NAME, MAX_PAYLOAD_BYTES, limit]).fetchall()
                origins = [r[0] for r in rows]
                confirms = conn.execute(
                    "SELECT DISTINCT ON (origin, node) origin, left(node, %s), payload FROM fleet_events "
                    "WHERE kind = 'confirm' AND origin = ANY(%s) AND octet_length(payload::text) <= %s "
                    "ORDER BY origin, node, seq DESC",
                    [MAX_NAME, origins, MAX_PAYLOAD_BYTES],
                ).fetchall()
        except (psycopg.Error, OSError, GitmdError) as e:
            raise UnavailableError(f"the fleet store cannot be read now: {e}") from None
        outcomes: dict[str, list[dict[str, Any]]] = {}
        for origin, node, payload in confirms:
            if isinstance(payload, dict):
                o = {"node": node, "held": bool(payload.get("held")), "suspect": bool(payload.get("suspect"))}
                o.update(speedup=_number(payload.get("speedup")), reason=str(payload.get("reason", ""))[:300])
                outcomes.setdefault(origin, []).append(o)
        out = []
        for origin, _seq, node, gpu, payload, created, latest in rows:
            p: dict[str, Any] = payload if isinstance(payload, dict) else {}
            w = _of(p, "workload", dict, {})
            env = _of(p, "env", dict, {})
            ci = _of(p, "ci", list, [])
            ci = ci if len(ci) == 2 else [None, None]
            local = self._local(origin)
            out.append({
                "origin": origin[:MAX_NAME], "node": node, "gpu_model": gpu,
                "workload_name": str(w.get("name", ""))[:256],
                "env": {str(k)[:128]: str(v)[:256] for k, v in list(env.items())[:64]},
                "live": _of(p, "live", list, [])[:4],
                "speedup": _number(p.get("speedup")), "ci_low": _number(ci[0]), "ci_high": _number(ci[1]),
                "created_ns": int(created.timestamp() * 1e9),
                "state": {"revert": "reverted", "pin": "pinned"}.get(latest or "", "in force"),
                "outcomes": outcomes.get(origin, []), "local_policy_id": local[0] if local else 0,
            })  # fmt: skip
        return out

    # -- state -----------------------------------------------------------------------------------------
    def _count(self, **kw: Any) -> None:
        sets = ", ".join(
            f"{k} = {k} + ?" if k in ("pushed", "pulled", "refused", "errors") else f"{k} = ?" for k in kw
        )
        with self.store.transaction() as db:
            db.execute(f"UPDATE fleet_state SET {sets} WHERE id = 1", list(kw.values()))

    def status(self) -> SyncStatus:
        with self.store.reading() as db:
            r = db.conn.execute(
                "SELECT cursor, pushed, pulled, refused, errors, last_ok_ns, last_error FROM fleet_state"
            ).fetchone()
            outbox = db.conn.execute("SELECT COUNT(*) FROM fleet_outbox").fetchone()[0]
        cursor, pushed, pulled, refused, errors, last_ok_ns, last_error = r
        return SyncStatus(cursor, pushed, pulled, refused, errors, last_ok_ns, last_error, int(outbox))

    # -- the thread --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleet-sync", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """A round now (a library miss at registration), without waiting for it; at most one every
        TRIGGER_EVERY_S (a user registering random keys cannot keep rounds running back to back)."""
        now = time.monotonic()
        if now - self._triggered >= TRIGGER_EVERY_S:
            self._triggered = now
            self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the round: a trigger during it brings the next one at once
            self.behind = False
            self.run_once()
            # caught up (or failed): the next round at its time; behind: the next one after a
            # breath (whoever writes a full batch every round cannot keep this thread busy)
            self._wake.wait(self.cfg.pull_every_s if not self.behind else CATCH_UP_PAUSE_S)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.connect_timeout_s + 5)
        self.close()


def frameworks_differ(theirs: dict[str, str], mine: dict[str, str]) -> str:
    """The frameworks both sides ran at other versions, said in one line ("" : none, or nothing
    known here)."""
    diff = [
        f"{k} {theirs[k]} there, {mine[k]} here"
        for k in sorted(set(theirs) & set(mine))
        if theirs[k] != mine[k]
    ]
    return "; ".join(diff)
