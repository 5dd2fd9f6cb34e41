"""The values each setting may take: a checker per key, which coerces it or raises ValueError."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitmd.config.sections import (
    BACKENDS,
    CAPTURE_KINDS,
    LAUNCH_LEVERS,
    LIVE_LEVERS,
    LOG_LEVELS,
    REMOTE_ROLES,
)

Checker = Callable[[Any], Any]


def _positive_float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ValueError("must be a number greater than 0")
    return float(v)


def _nonneg_float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ValueError("must be a number of at least 0")
    return float(v)


def _int_range(lo: int, hi: int) -> Checker:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"must be an integer from {lo} to {hi}")
        return v

    return check


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    return v


def _choice(options: tuple[str, ...]) -> Checker:
    def check(v: Any) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(repr(o) for o in options)}")
        return str(v)

    return check


def _path(v: Any) -> Path:
    if not isinstance(v, str) or not v:
        raise ValueError("must be a non-empty path string")
    return Path(v)


def _mode(v: Any) -> int:
    if isinstance(v, str) and re.fullmatch(r"0?[0-7]{3,4}", v):
        return int(v, 8)
    raise ValueError('must be an octal mode string such as "0660"')


def _fraction(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
        raise ValueError("must be a number greater than 0 and at most 1")
    return float(v)


def _early_speedup(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (v == 0 or 1.2 <= v <= 100):
        raise ValueError("must be 0 (off) or a speedup between 1.2 and 100")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):\d{1,5}")


def _listen(v: Any) -> str:
    if not isinstance(v, str) or (
        v and not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):\d{1,5}", v)
    ):
        raise ValueError('must be "HOST:PORT" (e.g. "0.0.0.0:9443"), or "" for no TCP listener')
    if v and not 0 < int(v.rsplit(":", 1)[1]) < 65536:
        raise ValueError("port must be 1..65535")
    return v


def _subjects(v: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, dict):
        raise ValueError(
            'must be a table of certificate common name = role, e.g. { "slurm-ctl" = "scheduler" }'
        )
    for cn, role in v.items():
        if role not in REMOTE_ROLES:
            raise ValueError(f"role of {cn!r} must be one of {', '.join(REMOTE_ROLES)}")
    return tuple(sorted(v.items()))


def _live_levers(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or any(x not in LIVE_LEVERS for x in v):
        raise ValueError(f"must be a list drawn from {', '.join(LIVE_LEVERS)}")
    return tuple(v)


def _launch_levers(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or any(x not in LAUNCH_LEVERS for x in v):
        raise ValueError(f"must be a list drawn from {', '.join(LAUNCH_LEVERS)}")
    return tuple(v)


def _kinds(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or any(k not in CAPTURE_KINDS for k in v):
        raise ValueError(f"must be a non-empty list drawn from {', '.join(CAPTURE_KINDS)}")
    return tuple(v)


def _fleet_url(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    if v and not v.startswith(("postgresql://", "postgres://")):
        raise ValueError("must be a postgresql:// URL (or empty: no fleet)")
    if v and "@" in v.split("//", 1)[1].split("/", 1)[0] and ":" in v.split("//", 1)[1].split("@", 1)[0]:
        raise ValueError("must not hold a password: put it in fleet.password_file (0600)")
    return v


SCHEMA: dict[str, dict[str, Checker]] = {
    "daemon": {
        "runtime_dir": _path,
        "state_dir": _path,
        "socket": _path,
        "socket_group": _string,
        "socket_mode": _mode,
        "log_level": _choice(LOG_LEVELS),
        "keep_days": _nonneg_float,
        "checkpoint_every_s": _nonneg_float,
        "audit_max_rows": _int_range(0, 10**9),
        "max_jobs_per_user": _int_range(1, 100_000),
        "stored_bytes_per_user": _int_range(1 << 20, 1 << 40),
    },
    "telemetry": {
        "backend": _choice(BACKENDS),
        "interval_s": _positive_float,
        "full_rate_retention_s": _positive_float,
        "downsampled_retention_s": _positive_float,
        "retention_interval_s": _positive_float,
    },
    "metrics": {"port": _int_range(0, 65535), "address": _string},
    "capture": {
        "shim_path": _path,
        "cupti_path": _path,
        "window_every_s": _nonneg_float,
        "window_duration_s": _positive_float,
        "first_window_s": _nonneg_float,
        "settle_s": _nonneg_float,
        "session_windows": _int_range(1, 1000),
        "reobserve_every": _int_range(0, 1_000_000),
        "observe_runs": _int_range(1, 1000),
        "shim_on_resting_runs": _bool,
        "detach_cupti": _bool,
        "ring_records": _int_range(64, 1 << 24),
        "flush_interval_ms": _int_range(10, 60_000),
        "context_interval_ms": _int_range(5, 10_000),
        "kinds": _kinds,
        "overhead_budget": _fraction,
        "launch_cost_us": _nonneg_float,
        "attached_cost_us": _nonneg_float,
        "observation_budget": _nonneg_float,
        "free_guard": _bool,
        "keep_windows": _int_range(0, 10_000),
    },
    "experiments": {
        "enabled": _bool,
        "min_gain": _nonneg_float,
        "rounds": _int_range(3, 50),
        "settle_s": _nonneg_float,
        "live_levers": _live_levers,
        "launch_levers": _launch_levers,
        "run_rounds": _int_range(3, 50),
        "run_cost_cap": _fraction,
        "early_speedup": _early_speedup,
        "explore_known": _bool,
    },
    "access": {
        "read_group": _string,
        "admin_group": _string,
        "allow_device_levers": _bool,
        "token_ttl_s": _positive_float,
        "auth_socket": _path,
    },
    "remote": {
        "listen": _listen,
        "cert": _path,
        "key": _path,
        "client_ca": _path,
        "subjects": _subjects,
    },
    "fleet": {
        "url": _fleet_url,
        "password_file": _path,
        "sslmode": _choice(("disable", "allow", "prefer", "require", "verify-ca", "verify-full")),
        "sslrootcert": _path,
        "node": _string,
        "pull_every_s": _positive_float,
        "connect_timeout_s": _positive_float,
    },
    "sim": {
        "gpus": _int_range(0, 64),
        "seed": _int_range(0, 2**31 - 1),
        "name": _string,
        "memory_total_bytes": _int_range(1, 2**62),
        "throttle_episodes": lambda v: v,  # checked item by item below
        "processes": lambda v: v,
    },
}

EPISODE_SCHEMA: dict[str, Checker] = {
    "gpu": _int_range(0, 63),
    "start_s": _nonneg_float,
    "duration_s": _positive_float,
    "reason": _string,
    "sm_clock_factor": _positive_float,
}
PROCESS_SCHEMA: dict[str, Checker] = {
    "gpu": _int_range(0, 63),
    "pid": _int_range(1, 2**31 - 1),
    "name": _string,
    "used_memory_bytes": _int_range(0, 2**62),
    "start_s": _nonneg_float,
    "end_s": _nonneg_float,
    "sm_util_pct": _nonneg_float,
}
