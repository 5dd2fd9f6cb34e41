"""The library's export/import document: versioned JSON, and its validation.

An import is validated completely here, before anything is written; what a policy may carry (its
environment, its live levers) is checked by the same functions for imports and for new policies.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable
from typing import Any

from gitmd.errors import InvalidArgumentError
from gitmd.store.library_model import STATUSES, Workload

FORMAT = "gitm-library"
VERSION = 1
MAX_IMPORT_BYTES = 16 << 20  # gitmd's largest request (gitmd.api.server.MAX_RECEIVE_BYTES)
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


def export_document(workloads: Iterable[Workload]) -> dict[str, Any]:
    """The export document: every workload with its launch keys and policies."""
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
            for w in workloads
        ],
    }


# -- validation ------------------------------------------------------------------------------------


def _fail(where: str, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"import refused, nothing changed: {where}: {what}")


def _typed(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise _fail(where, "must not be a boolean")
    if not isinstance(value, kind):
        raise _fail(where, f"must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 63):
        raise _fail(where, "out of range (a 64-bit integer)")  # 2**70 answered UNKNOWN (item 8)
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
    except RecursionError:  # hardening issue, item 8: deeply nested JSON answered UNKNOWN
        raise _fail("document", "nested too deeply") from None
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
