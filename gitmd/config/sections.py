"""The configuration's sections: one frozen dataclass per TOML table, with its defaults.

What each setting means is said beside it; gitmd.config.checks says what values each may take.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    # the store kept to a size (gitmd/store/prune.py): ended jobs and audit rows older than this many
    # days are deleted (0: kept forever); the library, trials and experiments are always kept
    keep_days: float = 90.0
    audit_max_rows: int = 1_000_000  # the oldest audit rows beyond this many go (0: no cap)
    # one user's open jobs (registered or running) at most: a registration beyond is refused
    # (RESOURCE_EXHAUSTED); each job is a store row, a directory and a ring to watch
    max_jobs_per_user: int = 128
    # what one user's jobs may hold in the store (their rows: command, cwd, contract, steps...): a
    # registration beyond deletes that user's oldest ended jobs first, and is refused
    # (RESOURCE_EXHAUSTED) when their open jobs alone hold this much
    stored_bytes_per_user: int = 256 << 20
    # the store's write-ahead log is copied into the database (a checkpoint, with its fsync) from a
    # background thread this often, not inside whichever request's commit crossed SQLite's
    # threshold: RegisterJob's sequential p99 over the socket 3.4-3.7 ms against 5.9-6.3 ms, and
    # the 8-client burst rate not lower (2 cores, interleaved, 2026-12-04; every 1 s cost the
    # burst more: bench/results/2026-12-04-store-checkpoint-cpu.md); SQLite's own checkpoint stays
    # as a backstop at a larger log (gitmd/store/db.py). 0: SQLite's own only, on the request path
    checkpoint_every_s: float = 5.0

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
# What a window asks by default: every kind but memset. CUPTI stays attached to a process after its
# first window (never detached: that crashed jobs), and each activity kind enabled once leaves later
# launches slower after it is disabled again; measured inside one process on the H200 (2026-12-04,
# bench/results/2026-12-04-cupti-residual-h200.md), launch-bound training step: memset +4.5%,
# kernel +3.5%, memcpy +2.9%, memory and the callbacks ~0. Memsets are rarely a step's time, and a
# memset-heavy job can still ask for them (capture.kinds). Sync is no activity kind any more: the shim
# times the host's sync calls from their callbacks (SYNCHRONIZATION activity left +15%).
DEFAULT_CAPTURE_KINDS = tuple(k for k in CAPTURE_KINDS if k != "memset")


@dataclass(frozen=True)
class CaptureConfig:
    shim_path: Path | None = None  # None: the installed or built shim, found automatically
    # the libcupti the shim opens in the job (GITM_CUPTI_PATH); None: the shim looks for it (the
    # dynamic linker's search, then $CUDA_HOME, $CUDA_PATH and /usr/local/cuda's usual folders)
    cupti_path: Path | None = None
    window_every_s: float = 30.0  # duty cycle: one window this often per running job (0: only on demand)
    window_duration_s: float = 2.0
    # a job's first duty window: this long (at most window_duration_s), since its launch rate, and
    # so what a full window costs it, is unknown until a window has seen it; 0: as long as the others
    first_window_s: float = 0.25
    # a recurring job whose earlier runs lasted at least twice this long gets its first duty window
    # once its processes are this old: from a process's first window on CUPTI stays attached to it
    # (~40% per launch on a launch-bound loop, H200), so an earlier window costs that for longer, and
    # start-up windows rarely show the step; a job that got its workload's policy and is not explored
    # waits too, and so does a first run (taken as long until it has shown otherwise); a recurring
    # job's observation is placed late in its expected run, short ones included (Observe.
    # first_window_age_s); jobs with a live policy whose lever needs a window keep the early window
    # (launch trials' runs get none); 0: no wait
    settle_s: float = 10.0
    # a process is observed in one stretch: once this many windows of its job are analysed, it is
    # settled and nothing gitmd runs on it needs another (an experiment, a live lever that acts
    # through a window), it gets no more windows (its shim detaches CUPTI then only with
    # detach_cupti; attaching CUPTI again after a detach crashed jobs). Its windows come a second
    # apart meanwhile, as do a job's start-up windows (until one finds its step): between them
    # CUPTI stays attached with its activity off (~40% per launch on a launch-bound loop)
    session_windows: int = 3
    # a recurring program is observed on its first observe_runs runs, then on fewer and fewer:
    # after k observed runs, the next is observed once 2^(k - observe_runs + 1) - 1 runs have gone
    # unobserved (at most reobserve_every - 1). A run not observed gets no window (a short timm
    # training paid 15% a run for its windows, H200 2026-12-04).
    # Observed regardless: a run whose workload has a live trial to continue, a live policy that acts
    # through a window, a fleet policy to confirm; launch trials' runs get none anyway. 0: every run
    reobserve_every: int = 32
    observe_runs: int = 2
    # such a run also goes without the shim (unless it carries a live policy, whose levers act on
    # the processes the shim names): CUPTI loaded with every activity off still cost a launch-bound
    # corpus program 16-44% of its GPU time in runs that got no window (cupy-cg, H200 2026-12-04);
    # its length is then its launcher's clock (jobs.wall_s); so does a launch trial's run, both arms,
    # timed by its launcher. true: keep the shim on those runs
    shim_on_resting_runs: bool = False
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
    kinds: tuple[str, ...] = DEFAULT_CAPTURE_KINDS
    overhead_budget: float = 0.01  # amortised slowdown the duty cycle may cost a job within a run
    # what observing may cost a recurring program across its runs: once the backoff says a run is
    # due, the program's observed runs' cost share (their cost record) spread over the unobserved
    # runs between two observed ones must fit (gitmd/loop/cost.py: amortised_gap); 0: the backoff alone
    observation_budget: float = 0.01
    launch_cost_us: float = 6.0  # CUPTI's cost per kernel launch while a window is open (H200)
    # CUPTI's cost per kernel launch between windows once a window has attached it (activity off,
    # not detached): +44% on an 8.6-us launch loop, 3.8 us (H200, bench/results/2026-12-02-shim-h200.md);
    # what gitmd's model of a run's cost counts from its first window on (gitmd/loop/cost.py)
    attached_cost_us: float = 3.8
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
    # the most of a run's time so far its live trials' losing treatment windows may cost it
    # (measured: each B window slower than its A, for its length and the settle before it); a trial
    # that would go beyond stops, its pairs kept for the next run of the workload to continue, and no
    # further trial starts on that run (convergence issue: a live CPU trial cost a run 49%). 0: none
    run_cost_cap: float = 0.02
    # a launch trial whose every pair of runs is at least this much faster by the runs' own clock,
    # beyond 3x the workload's run-to-run spread (from 3 plain runs) and within what its cause
    # allows, outputs equal, is decided before run_rounds pairs; a live experiment likewise after
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
class FleetConfig:
    """The fleet library on PostgreSQL (gitmd/fleet/): what one node learns, every node knows. Off
    unless ``url`` is set. The node's own SQLite store stays its store and works alone: a slow or
    absent fleet store never delays a registration or fails a job."""

    url: str = ""  # libpq URL without a password, e.g. "postgresql://gitmd@db.example:5432/gitmd"
    password_file: Path | None = None  # the password, in a file only root may read (0600)
    # libpq's: disable, allow, prefer, require, verify-ca, verify-full. verify-full by default: a
    # fleet store reached in plain text, or one that is not who it says, could hand this node
    # policies; a test server on loopback says disable
    sslmode: str = "verify-full"
    sslrootcert: Path | None = None  # the CA that signs the server's certificate (verify-*)
    node: str = ""  # this node's name in the fleet ("" : the host name)
    pull_every_s: float = 30.0  # what other nodes learned is pulled this often (and on a library miss)
    connect_timeout_s: float = 3.0


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


SECTIONS = ("daemon", "telemetry", "metrics", "capture", "experiments", "access", "remote", "fleet")


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    experiments: ExperimentsConfig = field(default_factory=ExperimentsConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    source: Path | None = None  # the file it came from, None for built-in defaults

    def summary(self) -> dict[str, str]:
        """Flattened "section.key" -> value, for GetStatus and logs."""
        out: dict[str, str] = {}
        for section in SECTIONS:
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

    def toml(self) -> str:
        """The effective configuration as a TOML file gitmd reads back unchanged (`gitmd
        --check-config`, `gitmctl status --config`: hardening issue, item 11, they printed
        "key = value" lines that were not TOML). A setting left unset is a comment; the
        simulated backend's episodes and processes are not written."""
        lines = [f"# gitmd's effective configuration ({self.source or 'built-in defaults'})"]
        for name in (*SECTIONS, "sim"):
            section = getattr(self, name)
            lines.append(f"\n[{name}]")
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                if value is None:
                    lines.append(f"# {f.name}: not set (its default applies)")
                elif name == "sim" and f.name in ("throttle_episodes", "processes"):
                    continue
                elif name == "daemon" and f.name == "socket_mode":
                    lines.append(f'{f.name} = "{value:04o}"')
                elif name == "remote" and f.name == "subjects":
                    pairs = ", ".join(f"{_toml(cn)} = {_toml(role)}" for cn, role in value)
                    lines.append(f"{f.name} = {{ {pairs} }}")
                else:
                    lines.append(f"{f.name} = {_toml(value)}")
        return "\n".join(lines) + "\n"

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


def _toml(v: Any) -> str:
    """A TOML value: booleans, numbers, strings (paths too) and arrays of them."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, tuple | list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))
