"""The library: workloads by fingerprint, the launch keys seen for them, and their policies.

A recurring job gets its policy at registration: the launch key finds the workload, and the
workload's active policy (pinned, else the validated one with the best speedup) goes into the
launch plan. Export and import use a versioned JSON document; an import is validated completely
before anything is written, and never silently replaces a pinned policy.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gitmd.analysis.fingerprint import MATCH_THRESHOLD, Signature, similarity
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.store.db import Store

FORMAT = "gitm-library"
VERSION = 1
STATUSES = ("candidate", "validated", "pinned", "reverted")
MAX_IMPORT_BYTES = 64 << 20
MAX_WORKLOADS = 100_000
MAX_POLICIES_PER_WORKLOAD = 1000
MAX_KEYS_PER_WORKLOAD = 1000
MAX_ENV = 64
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# Never settable by a policy: they would run code in the job or take the shim away from gitmd.
FORBIDDEN_ENV = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "CUDA_INJECTION64_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PATH",
    }
)
_ID = re.compile(r"^[0-9a-f]{12}$")


@dataclass(frozen=True)
class Policy:
    id: int
    workload_id: str
    env: dict[str, str]
    status: str
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    gpu_model: str = ""
    driver: str = ""
    created_ns: int = 0
    updated_ns: int = 0
    pinned_by: str = ""
    # live levers to apply to each run once its processes are seen (their intent: the stream or
    # the CPUs are found anew in each run), e.g. [{"lever": "stream_priority", "setting": {...}}]
    live: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    signature: Signature
    first_seen_ns: int
    last_seen_ns: int
    run_count: int
    launch_keys: tuple[str, ...] = ()
    policies: tuple[Policy, ...] = ()

    @property
    def active_policy(self) -> Policy | None:
        """The policy for launches of anyone: pinned, else the best validated one that is not
        scoped to one user."""
        return self.active_policy_for(None)

    def active_policy_for(self, uid: int | None) -> Policy | None:
        """The policy a launch by ``uid`` gets: pinned, else the best validated one among those
        for everyone and those scoped to ``uid`` (a user's own `gitmctl tune` results apply to
        that user's launches only, until an admin pins them)."""
        pinned = [p for p in self.policies if p.status == "pinned"]
        if pinned:
            return max(pinned, key=lambda p: p.updated_ns)
        validated = [
            p for p in self.policies if p.status == "validated" and p.evidence.get("scope_uid") in (None, uid)
        ]
        return max(validated, key=lambda p: p.speedup or 0.0) if validated else None

    def live_policy_for(self, uid: int | None) -> Policy | None:
        """The policy whose live levers a launch by ``uid`` gets: the active one if it has live
        levers, else the best validated one that has (an environment policy and a live one then
        both apply: they act on different things)."""
        active = self.active_policy_for(uid)
        if active is not None and active.live:
            return active
        if active is not None and active.status == "pinned":
            return None  # a pin is exactly what runs
        live = [
            p
            for p in self.policies
            if p.status == "validated" and p.live and p.evidence.get("scope_uid") in (None, uid)
        ]
        return max(live, key=lambda p: p.speedup or 0.0) if live else None


def _sig_json(s: Signature) -> str:
    return json.dumps({"sequence": list(s.sequence), "shares": s.shares}, sort_keys=True)


def _sig_from(text: str) -> Signature:
    d = json.loads(text)
    return Signature(tuple(d["sequence"]), {str(k): float(v) for k, v in d["shares"].items()})


def _policy(r: dict[str, Any]) -> Policy:
    settings = json.loads(r["settings"])
    return Policy(
        id=r["id"],
        workload_id=r["workload_id"],
        env=settings.get("env", {}),
        live=tuple(settings.get("live", [])),
        status=r["status"],
        speedup=r["speedup"],
        ci_low=r["ci_low"],
        ci_high=r["ci_high"],
        evidence=json.loads(r["evidence"]),
        gpu_model=r["gpu_model"],
        driver=r["driver"],
        created_ns=r["created_ns"],
        updated_ns=r["updated_ns"],
        pinned_by=r["pinned_by"],
    )


class Library:
    def __init__(self, store: Store, allowed_env: frozenset[str] | None = None) -> None:
        """``allowed_env``: the only variables a policy may set — the launch levers' own
        (gitmd.levers.registry.env_variables, wired by the daemon); None: any not forbidden."""
        self.store = store
        self.allowed_env = allowed_env

    # -- reading -------------------------------------------------------------------------------
    def _workload(self, db: Any, row: dict[str, Any]) -> Workload:
        keys = tuple(
            r["key"]
            for r in db.query("SELECT key FROM launch_keys WHERE workload_id = ? ORDER BY key", [row["id"]])
        )
        pols = tuple(
            _policy(r)
            for r in db.query("SELECT * FROM policies WHERE workload_id = ? ORDER BY id", [row["id"]])
        )
        return Workload(
            row["id"],
            row["name"],
            _sig_from(row["signature"]),
            row["first_seen_ns"],
            row["last_seen_ns"],
            row["run_count"],
            keys,
            pols,
        )

    def get(self, workload_id: str) -> Workload:
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM workloads WHERE id = ?", [workload_id]))
            if not rows:
                raise NotFoundError(f"no workload {workload_id!r} in the library")
            return self._workload(db, rows[0])

    def list(self) -> list[Workload]:
        with self.store.reading() as db:
            return [
                self._workload(db, r) for r in db.query("SELECT * FROM workloads ORDER BY last_seen_ns DESC")
            ]

    def by_launch_key(self, key: str) -> Workload | None:
        """The workload last seen under this launch key (one indexed lookup)."""
        if not key:
            return None
        with self.store.reading() as db:
            # conn.execute, not db.query: this runs on every registration, and sqlite-utils wraps
            # each query in a savepoint.
            cur = db.conn.execute(
                "SELECT w.* FROM launch_keys k JOIN workloads w ON w.id = k.workload_id WHERE k.key = ?",
                [key],
            )
            row = cur.fetchone()
            if row is None:
                return None
            return self._workload(db, dict(zip([c[0] for c in cur.description], row, strict=True)))

    # -- learning ------------------------------------------------------------------------------
    def observe(self, sig: Signature, launch_key: str, name: str, new_run: bool) -> str:
        """The workload this signature belongs to (a new one if none matches); links the launch key."""
        now = time.time_ns()
        with self.store.transaction() as db:
            best_id, best = None, 0.0
            for r in db.query("SELECT id, signature FROM workloads"):
                s = similarity(sig, _sig_from(r["signature"]))
                if s > best:
                    best_id, best = r["id"], s
            if best_id is None or best < MATCH_THRESHOLD:
                best_id = sig.id
                db.execute(
                    "INSERT OR IGNORE INTO workloads "
                    "(id, name, signature, first_seen_ns, last_seen_ns, run_count) "
                    "VALUES (?, ?, ?, ?, ?, 0)",
                    [best_id, name, _sig_json(sig), now, now],
                )
            db.execute(
                "UPDATE workloads SET last_seen_ns = ?, run_count = run_count + ? WHERE id = ?",
                [now, 1 if new_run else 0, best_id],
            )
            if launch_key:
                db.execute(
                    "INSERT INTO launch_keys (key, workload_id, last_seen_ns) VALUES (?, ?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET workload_id = excluded.workload_id, "
                    "last_seen_ns = excluded.last_seen_ns",
                    [launch_key, best_id, now],
                )
        return best_id

    # -- operator actions ----------------------------------------------------------------------
    def _set_status(self, policy_id: int, status: str, pinned_by: str = "") -> Policy:
        now = time.time_ns()
        with self.store.transaction() as db:
            rows = list(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))
            if not rows:
                raise NotFoundError(f"no policy {policy_id}")
            p = _policy(rows[0])
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
            return _policy(next(iter(db.query("SELECT * FROM policies WHERE id = ?", [policy_id]))))

    def pin(self, policy_id: int, who: str) -> Policy:
        return self._set_status(policy_id, "pinned", who)

    def unpin(self, policy_id: int) -> Policy:
        return self._set_status(policy_id, "validated")

    def revert(self, policy_id: int) -> Policy:
        return self._set_status(policy_id, "reverted")

    # -- export / import -----------------------------------------------------------------------
    def export(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "exported_at_ns": time.time_ns(),
            "workloads": [
                {
                    "id": w.id,
                    "name": w.name,
                    "signature": {"sequence": list(w.signature.sequence), "shares": w.signature.shares},
                    "first_seen_ns": w.first_seen_ns,
                    "last_seen_ns": w.last_seen_ns,
                    "run_count": w.run_count,
                    "launch_keys": list(w.launch_keys),
                    "policies": [
                        {
                            "env": p.env,
                            "live": list(p.live),
                            "status": p.status,
                            "speedup": p.speedup,
                            "ci_low": p.ci_low,
                            "ci_high": p.ci_high,
                            "evidence": p.evidence,
                            "gpu_model": p.gpu_model,
                            "driver": p.driver,
                            "created_ns": p.created_ns,
                            "pinned_by": p.pinned_by,
                        }
                        for p in w.policies
                    ],
                }
                for w in self.list()
            ],
        }

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
                    (json.dumps(_policy(r).env, sort_keys=True))
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
                    db.execute(
                        "INSERT OR IGNORE INTO launch_keys (key, workload_id, last_seen_ns) VALUES (?, ?, ?)",
                        [key, w["id"], now],
                    )
                have = {
                    (json.dumps(_policy(r).env, sort_keys=True), r["status"])
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
            return _policy(next(iter(db.query("SELECT * FROM policies WHERE id = ?", [cur.lastrowid]))))


# -- validation ------------------------------------------------------------------------------------


def _fail(where: str, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"import refused, nothing changed: {where}: {what}")


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise _fail(where, "must not be a boolean")
    if not isinstance(value, kind):
        raise _fail(where, f"must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def check_env(env: Any, where: str, allowed: frozenset[str] | None = None) -> None:
    """A policy's environment: names and values sane, nothing that would run code in the job or take
    the shim away (FORBIDDEN_ENV, GITM_*), and with ``allowed`` only those variables (an imported
    policy setting BASH_ENV, NODE_OPTIONS or GLIBC_TUNABLES ran a payload as the job's user)."""
    _typed(env, dict, where)
    if len(env) > MAX_ENV:
        raise _fail(where, f"more than {MAX_ENV} variables")
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise _fail(where, f"{k!r} is not an environment variable name")
        if k in FORBIDDEN_ENV or k.startswith("GITM_"):
            raise _fail(where, f"{k} may not be set by a policy")
        if allowed is not None and k not in allowed:
            raise _fail(where, f"{k} is not a variable any lever of gitmd's catalog sets")
        if not isinstance(v, str) or len(v) > 4096 or "\0" in v:
            raise _fail(f"{where}.{k}", "must be a string of at most 4096 characters without NUL")


# Live levers a policy may carry, with the setting keys each may hold (its intent; the target —
# the stream, the CPUs — is found anew in every run).
LIVE_POLICY_LEVERS: dict[str, tuple[str, ...]] = {
    "stream_priority": ("priority",),
    "cpu_affinity": (),
    "sched_priority": ("nice",),
    "mempool_release": ("bytes",),
    "pin_host_buffer": (),  # the buffers are found anew in each run
    "cotenant_yield": ("share", "period_ms"),  # the background co-tenants too
    "sync_spin": ("sched",),
    "alloc_keep_cache_live": (),  # the process that empties the cache is found anew in each run
}


def check_live(live: Any, where: str) -> None:
    _typed(live, list, where)
    if len(live) > len(LIVE_POLICY_LEVERS):
        raise _fail(where, f"more than {len(LIVE_POLICY_LEVERS)} live levers")
    for i, item in enumerate(live):
        at = f"{where}[{i}]"
        _typed(item, dict, at)
        lever = item.get("lever")
        if lever not in LIVE_POLICY_LEVERS:
            raise _fail(f"{at}.lever", f"must be one of {', '.join(LIVE_POLICY_LEVERS)}")
        setting = _typed(item.get("setting", {}), dict, f"{at}.setting")
        for k, v in setting.items():
            if k not in LIVE_POLICY_LEVERS[lever]:
                raise _fail(
                    f"{at}.setting", f"{lever} takes {', '.join(LIVE_POLICY_LEVERS[lever]) or 'nothing'}"
                )
            if not isinstance(v, int) or isinstance(v, bool) or not -(1 << 63) <= v < (1 << 64):
                raise _fail(f"{at}.setting.{k}", "must be an integer")


def _number(v: Any, where: str, optional: bool = True) -> None:
    if v is None and optional:
        return
    _typed(v, (int, float), where)
    if not math.isfinite(v):
        raise _fail(where, "must be finite")


def validate_document(raw: bytes, allowed_env: frozenset[str] | None = None) -> dict[str, Any]:
    if len(raw) > MAX_IMPORT_BYTES:
        raise _fail("document", f"larger than {MAX_IMPORT_BYTES} bytes")
    try:
        doc = json.loads(
            raw, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not allowed"))
        )
    except (ValueError, UnicodeDecodeError) as e:
        raise _fail("document", f"not JSON ({e})") from None
    _typed(doc, dict, "document")
    if doc.get("format") != FORMAT:
        raise _fail("format", f"must be {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise _fail("version", f"{doc.get('version')!r} is not a version this gitmd reads ({VERSION})")
    workloads = _typed(doc.get("workloads"), list, "workloads")
    if len(workloads) > MAX_WORKLOADS:
        raise _fail("workloads", f"more than {MAX_WORKLOADS}")
    seen = set()
    for i, w in enumerate(workloads):
        at = f"workloads[{i}]"
        _typed(w, dict, at)
        wid = _typed(w.get("id"), str, f"{at}.id")
        if not _ID.fullmatch(wid) or wid in seen:
            raise _fail(f"{at}.id", "must be 12 hex digits, once")
        seen.add(wid)
        if len(_typed(w.get("name", ""), str, f"{at}.name")) > 200:
            raise _fail(f"{at}.name", "longer than 200 characters")
        sig = _typed(w.get("signature"), dict, f"{at}.signature")
        seq = _typed(sig.get("sequence"), list, f"{at}.signature.sequence")
        if len(seq) > 100_000 or not all(isinstance(x, str) and len(x) < 512 for x in seq):
            raise _fail(f"{at}.signature.sequence", "must be at most 100000 short strings")
        shares = _typed(sig.get("shares"), dict, f"{at}.signature.shares")
        for k, v in shares.items():
            _number(v, f"{at}.signature.shares[{k!r}]", optional=False)
        for key in ("first_seen_ns", "last_seen_ns", "run_count"):
            if _typed(w.get(key), int, f"{at}.{key}") < 0:
                raise _fail(f"{at}.{key}", "must not be negative")
        keys = _typed(w.get("launch_keys", []), list, f"{at}.launch_keys")
        if len(keys) > MAX_KEYS_PER_WORKLOAD or not all(
            isinstance(k, str) and 0 < len(k) <= 4096 for k in keys
        ):
            raise _fail(f"{at}.launch_keys", "must be non-empty strings")
        pols = _typed(w.get("policies", []), list, f"{at}.policies")
        if len(pols) > MAX_POLICIES_PER_WORKLOAD:
            raise _fail(f"{at}.policies", f"more than {MAX_POLICIES_PER_WORKLOAD}")
        for j, p in enumerate(pols):
            pat = f"{at}.policies[{j}]"
            _typed(p, dict, pat)
            check_env(p.get("env"), f"{pat}.env", allowed_env)
            check_live(p.setdefault("live", []), f"{pat}.live")
            if p.get("status") not in STATUSES:
                raise _fail(f"{pat}.status", f"must be one of {', '.join(STATUSES)}")
            for key in ("speedup", "ci_low", "ci_high"):
                _number(p.get(key), f"{pat}.{key}")
            _typed(p.get("evidence", {}), dict, f"{pat}.evidence")
            for key in ("gpu_model", "driver", "pinned_by"):
                if len(_typed(p.get(key, ""), str, f"{pat}.{key}")) > 200:
                    raise _fail(f"{pat}.{key}", "longer than 200 characters")
            _typed(p.get("created_ns", 0), int, f"{pat}.created_ns")
            p.setdefault("evidence", {})
            for key in ("speedup", "ci_low", "ci_high"):
                p.setdefault(key, None)
            for key in ("gpu_model", "driver", "pinned_by"):
                p.setdefault(key, "")
            p.setdefault("created_ns", 0)
        w.setdefault("name", "")
        w.setdefault("launch_keys", [])
        w.setdefault("policies", [])
    return doc
