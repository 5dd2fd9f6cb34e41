"""gitmd's configuration: TOML at /etc/gitmd/gitmd.toml (or --config), typed and validated.

Every error names the file, the key and its line; unknown keys are errors, so a typo never passes
silently. Every path is relocatable, for tests and for the embedded default under ./var/.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmd.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/gitmd/gitmd.toml")
BACKENDS = ("auto", "nvml", "rocm", "sim")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class DaemonConfig:
    runtime_dir: Path = Path("/run/gitmd")
    state_dir: Path = Path("/var/lib/gitmd")
    socket: Path | None = None  # None: <runtime_dir>/gitmd.sock
    socket_group: str = "gitm"
    socket_mode: int = 0o666  # every local user may connect; what they may do is decided per call
    log_level: str = "info"

    @property
    def socket_path(self) -> Path:
        return self.socket if self.socket is not None else self.runtime_dir / "gitmd.sock"

    @property
    def db_path(self) -> Path:
        return self.state_dir / "gitmd.db"


@dataclass(frozen=True)
class TelemetryConfig:
    backend: str = "auto"
    interval_s: float = 1.0
    full_rate_retention_s: float = 3600.0
    downsampled_retention_s: float = 7 * 86400.0
    retention_interval_s: float = 60.0


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 9402  # 0: off
    address: str = "127.0.0.1"


CAPTURE_KINDS = ("kernel", "memcpy", "memset", "sync", "memory", "payload", "streams", "hostsrc")


@dataclass(frozen=True)
class CaptureConfig:
    shim_path: Path | None = None  # None: the installed or built shim, found automatically
    window_every_s: float = 30.0  # duty cycle: one window this often per running job (0: only on demand)
    window_duration_s: float = 2.0
    # a job's first duty window: this long (at most window_duration_s), since its launch rate, and
    # so what a full window costs it, is unknown until a window has seen it; 0: as long as the others
    first_window_s: float = 0.25
    # a recurring job whose earlier runs lasted at least twice this long gets its first duty window
    # once its processes are this old: from a process's first window on CUPTI stays attached to it
    # (~40% per launch on a launch-bound loop, H200), so an earlier window costs that for longer, and
    # start-up windows rarely show the step; a job that got its workload's policy and is not explored
    # waits too, and so does a first run (taken as long until it has shown otherwise); short jobs and
    # jobs with a live policy whose lever needs a window keep the early window (launch trials' runs
    # get none); 0: no wait
    settle_s: float = 10.0
    # a process is observed in one stretch: once this many windows of its job are analysed, it is
    # settled and nothing gitmd runs on it needs another (an experiment, a live lever that acts
    # through a window), its shim detaches CUPTI (once: attaching CUPTI again after a detach crashed
    # jobs) and it gets no more windows. Its windows come a second apart meanwhile, as do a job's
    # start-up windows (until one finds its step): between them CUPTI stays attached with its
    # activity off (~40% per launch on a launch-bound loop)
    session_windows: int = 3
    # let the shim detach CUPTI (cuptiFinalize, once) when a process's observation ends, so a
    # launch-bound job pays nothing after it. Off: on the H200 (CUDA 13.0) the finalize raced with
    # another thread's kernel launch inside CUPTI and killed a third-party training job (timm's
    # benchmark, SIGSEGV in the autograd thread's cuLaunchKernel, 2 of 3 runs; jobs where CUDA is
    # called from one thread never crashed). Off, CUPTI stays attached with its activity disabled
    # after a process's first window: ~+40% per launch on a launch-bound loop, ~+0.4% on a
    # GPU-bound training step (bench/results/2026-12-02-shim-h200.md)
    detach_cupti: bool = False
    ring_records: int = 1 << 16  # per process, 64 bytes each
    flush_interval_ms: int = 250
    context_interval_ms: int = 25  # host and GPU sampling period while a window is open
    kinds: tuple[str, ...] = CAPTURE_KINDS
    overhead_budget: float = 0.01  # amortised slowdown the duty cycle may cost a job
    launch_cost_us: float = 6.0  # CUPTI's cost per kernel launch while a window is open (H200)
    # preload libgitm_guard.so (next to the shim) into jobs, so pin_host_buffer can page-lock hot
    # host buffers: it unregisters a range before the program frees or unmaps it
    free_guard: bool = True
    # the newest this many analysed windows of each job (duty and experiment windows) written to
    # <state_dir>/windows/<job id>/<window id>.npz, in `gitmctl trace --raw`'s format, for diagnosing
    # what gitmd saw (root-only: they hold kernel names and output samples); 0: none
    keep_windows: int = 0


LIVE_LEVERS = (
    "cpu_affinity",
    "sched_priority",
    "stream_priority",
    "mempool_release",
    "pin_host_buffer",
    "cotenant_yield",
    "sync_spin",
    "alloc_keep_cache_live",
)


LAUNCH_LEVERS = (
    "tf32_override",
    "alloc_expandable_segments",
    "alloc_gc_threshold",
    "alloc_max_split_size",
    "alloc_keep_cache",
    "cuda_device_max_connections",
    "cpu_threads",
    "cudnn_benchmark",
    "dataloader_pin_memory",
    "dataloader_workers",
)


@dataclass(frozen=True)
class ExperimentsConfig:
    enabled: bool = True  # live experiments on jobs whose registration allows exploration
    min_gain: float = 0.03  # promote only when the interval's lower bound clears 1 + min_gain
    rounds: int = 4  # AB/BA pairs per experiment
    settle_s: float = 0.5  # after applying, before the treatment window
    live_levers: tuple[str, ...] = LIVE_LEVERS
    # launch levers across runs of a recurring workload (its registrations get A or B in their plan)
    launch_levers: tuple[str, ...] = LAUNCH_LEVERS
    run_rounds: int = 3  # AB/BA pairs of runs per launch trial
    # a launch trial whose every B window is at least this much faster than every A window of its
    # pair(s), outputs equal, is decided before run_rounds pairs; a live experiment likewise after
    # two pairs of windows, before `rounds` (0: never early)
    early_speedup: float = 1.5
    # a launch that got its workload's validated policy is not explored further: the library
    # says the workload is tuned (`gitmctl tune -- CMD` still tries launch levers on request)
    explore_known: bool = False


@dataclass(frozen=True)
class AccessConfig:
    read_group: str = "gitm"  # read-only calls: root and this group
    admin_group: str = "gitm-admin"  # library-wide actions: root and this group
    allow_device_levers: bool = False  # power limit and clocks; root only, and only when true
    token_ttl_s: float = 60.0  # lifetime of a single-use token from the credential socket
    auth_socket: Path | None = None  # None: <socket's stem>-auth.sock beside the API socket


REMOTE_ROLES = ("reader", "scheduler", "admin")


@dataclass(frozen=True)
class RemoteConfig:
    """The optional TCP listener for remote schedulers: mutual TLS only, off unless ``listen`` is set."""

    listen: str = ""  # e.g. "0.0.0.0:9443"; empty: no TCP listener
    cert: Path | None = None  # the server's certificate chain (PEM)
    key: Path | None = None  # its private key (PEM)
    client_ca: Path | None = None  # CA(s) that sign client certificates (PEM); required
    subjects: tuple[tuple[str, str], ...] = ()  # certificate common name -> role


@dataclass(frozen=True)
class ThrottleEpisode:
    gpu: int
    start_s: float
    duration_s: float
    reason: str = "sw_power_cap"
    sm_clock_factor: float = 0.6


@dataclass(frozen=True)
class SimProcess:
    gpu: int
    pid: int
    name: str = "sim-job"
    used_memory_bytes: int = 1 << 30
    start_s: float = 0.0
    end_s: float | None = None
    sm_util_pct: float = 50.0  # what its per-process utilization samples say


@dataclass(frozen=True)
class SimConfig:
    gpus: int = 2
    seed: int = 0
    name: str = "Simulated H200"
    memory_total_bytes: int = 141 * 10**9
    throttle_episodes: tuple[ThrottleEpisode, ...] = ()
    processes: tuple[SimProcess, ...] = ()


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    experiments: ExperimentsConfig = field(default_factory=ExperimentsConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    source: Path | None = None  # the file it came from, None for built-in defaults

    def summary(self) -> dict[str, str]:
        """Flattened "section.key" -> value, for GetStatus and logs."""
        out: dict[str, str] = {}
        for section in ("daemon", "telemetry", "metrics", "capture", "experiments", "access", "remote"):
            for f in dataclasses.fields(getattr(self, section)):
                value = getattr(getattr(self, section), f.name)
                if f.name == "socket_mode":
                    value = oct(value)
                if isinstance(value, tuple):
                    value = ",".join(v if isinstance(v, str) else "=".join(v) for v in value)
                out[f"{section}.{f.name}"] = "" if value is None else str(value)
        out["daemon.socket"] = str(self.daemon.socket_path)
        out["access.auth_socket"] = str(self.auth_socket_path)
        out["config.source"] = str(self.source) if self.source else "(built-in defaults)"
        return out

    @property
    def auth_socket_path(self) -> Path:
        if self.access.auth_socket is not None:
            return self.access.auth_socket
        sock = self.daemon.socket_path
        return sock.with_name(sock.stem + "-auth.sock")

    def relocated(self, prefix: Path) -> Config:
        """All paths under ``prefix``: state in prefix/lib, runtime in prefix/run (make run's ./var/)."""
        prefix = prefix.absolute()
        daemon = dataclasses.replace(
            self.daemon, state_dir=prefix / "lib", runtime_dir=prefix / "run", socket=None
        )
        access = dataclasses.replace(self.access, auth_socket=None)
        return dataclasses.replace(self, daemon=daemon, access=access)


# --- validation -------------------------------------------------------------------------------

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


_SCHEMA: dict[str, dict[str, Checker]] = {
    "daemon": {
        "runtime_dir": _path,
        "state_dir": _path,
        "socket": _path,
        "socket_group": _string,
        "socket_mode": _mode,
        "log_level": _choice(LOG_LEVELS),
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
        "window_every_s": _nonneg_float,
        "window_duration_s": _positive_float,
        "first_window_s": _nonneg_float,
        "settle_s": _nonneg_float,
        "session_windows": _int_range(1, 1000),
        "detach_cupti": _bool,
        "ring_records": _int_range(64, 1 << 24),
        "flush_interval_ms": _int_range(10, 60_000),
        "context_interval_ms": _int_range(5, 10_000),
        "kinds": _kinds,
        "overhead_budget": _fraction,
        "launch_cost_us": _nonneg_float,
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
    "sim": {
        "gpus": _int_range(0, 64),
        "seed": _int_range(0, 2**31 - 1),
        "name": _string,
        "memory_total_bytes": _int_range(1, 2**62),
        "throttle_episodes": lambda v: v,  # checked item by item below
        "processes": lambda v: v,
    },
}

_EPISODE_SCHEMA: dict[str, Checker] = {
    "gpu": _int_range(0, 63),
    "start_s": _nonneg_float,
    "duration_s": _positive_float,
    "reason": _string,
    "sm_clock_factor": _positive_float,
}
_PROCESS_SCHEMA: dict[str, Checker] = {
    "gpu": _int_range(0, 63),
    "pid": _int_range(1, 2**31 - 1),
    "name": _string,
    "used_memory_bytes": _int_range(0, 2**62),
    "start_s": _nonneg_float,
    "end_s": _nonneg_float,
    "sm_util_pct": _nonneg_float,
}


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """1-based line of ``key`` inside ``[section]`` (or of the section header), best effort."""
    current = ""
    header_line = None
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        m = re.match(r"^\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?", stripped)
        if m:
            current = m.group(1)
            if current == section and header_line is None:
                header_line = n
            continue
        if key is not None and current == section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return n
    return header_line


class _Reporter:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def error(self, section: str, key: str | None, message: str) -> ConfigError:
        line = _line_of(self.text, section, key)
        where = f"{section}.{key}" if key else f"[{section}]"
        at = f", line {line}" if line else ""
        return ConfigError(f"{self.path}{at}: {where} {message}")


def _check_table(
    rep: _Reporter, section: str, raw: Any, schema: Mapping[str, Checker], what: str
) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise rep.error(section, None, f"must be a table of {what}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in schema:
            known = ", ".join(sorted(schema))
            raise rep.error(section, key, f"is not a known setting (known: {known})")
        try:
            out[key] = schema[key](value)
        except ValueError as e:
            raise rep.error(section, key, f"{e} (got {value!r})") from None
    return out


def _items(rep: _Reporter, key: str, raw: Any, schema: Mapping[str, Checker], req: set[str]) -> list[dict]:
    if not isinstance(raw, list):
        raise rep.error("sim", key, "must be an array of tables")
    items = []
    for i, item in enumerate(raw):
        checked = _check_table(rep, "sim", item, schema, f"{key}[{i}] settings")
        missing = req - set(checked)
        if missing:
            raise rep.error("sim", key, f"[{i}] lacks {', '.join(sorted(missing))}")
        items.append(checked)
    return items


def parse(text: str, path: Path) -> Config:
    """Parse and validate a TOML document; raise ConfigError naming the key and line."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    rep = _Reporter(path, text)
    for section in raw:
        if section not in _SCHEMA:
            known = ", ".join(sorted(_SCHEMA))
            raise rep.error(section, None, f"is not a known section (known: {known})")
    sections = {s: _check_table(rep, s, raw.get(s, {}), _SCHEMA[s], "settings") for s in _SCHEMA}

    sim = dict(sections["sim"])
    sim["throttle_episodes"] = tuple(
        ThrottleEpisode(**d)
        for d in _items(
            rep,
            "throttle_episodes",
            sim.get("throttle_episodes", []),
            _EPISODE_SCHEMA,
            {"gpu", "start_s", "duration_s"},
        )
    )
    sim["processes"] = tuple(
        SimProcess(**d)
        for d in _items(rep, "processes", sim.get("processes", []), _PROCESS_SCHEMA, {"gpu", "pid"})
    )
    remote = RemoteConfig(**sections["remote"])
    if remote.listen:
        for key in ("cert", "key", "client_ca"):
            if getattr(remote, key) is None:
                raise rep.error(
                    "remote", key, "is required when remote.listen is set (the listener is mutual TLS only)"
                )
    return Config(
        daemon=DaemonConfig(**sections["daemon"]),
        experiments=ExperimentsConfig(**sections["experiments"]),
        access=AccessConfig(**sections["access"]),
        remote=remote,
        telemetry=TelemetryConfig(**sections["telemetry"]),
        metrics=MetricsConfig(**sections["metrics"]),
        capture=CaptureConfig(**sections["capture"]),
        sim=SimConfig(**sim),
        source=path,
    )


def load(path: Path | None) -> Config:
    """Load ``path``; with None, the default file if it exists, else built-in defaults."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    return parse(text, path)
