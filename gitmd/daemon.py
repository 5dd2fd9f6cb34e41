"""The one place that builds and wires every object, and the daemon's lifecycle.

start: directories and locks -> store (migrations) -> telemetry backend -> sampler and retention on
APScheduler -> gRPC on the Unix socket -> metrics -> READY=1. stop (SIGTERM/SIGINT): STOPPING=1,
then the reverse order; each step runs even when an earlier one failed.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler

from gitmd import __version__, sdnotify
from gitmd.capture import abi as capture_abi
from gitmd.capture import duty
from gitmd.capture.context import ContextSampler
from gitmd.capture.windows import CaptureManager
from gitmd.config import Config
from gitmd.errors import GitmdError
from gitmd.jobs.liveness import ProcessWatcher
from gitmd.jobs.registry import JobRegistry
from gitmd.levers.registry import env_variables
from gitmd.paths import RUNTIME_DIR_MODE, STATE_DIR_MODE, InstanceLock, clear_stale_socket, ensure_dir
from gitmd.store.db import Store
from gitmd.store.library import Library
from gitmd.store.prune import prune, prune_windows
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import TelemetryBackend, select_backend
from gitmd.telemetry.nvml import NvmlBackend
from gitmd.telemetry.rocm import RocmBackend
from gitmd.telemetry.sampler import RETENTION_JOB_ID, Sampler
from gitmd.telemetry.sim import SimBackend

log = logging.getLogger(__name__)

DUTY_JOB_ID = "capture.duty_cycle"
YIELD_RENEW_S = 5.0  # co-tenant yields lift themselves 20 s after their last renewal
REAP_JOB_ID = "jobs.reap"
REAP_EVERY_S = 15.0
PRUNE_EVERY_S = 3600.0  # the store kept to daemon.keep_days and daemon.audit_max_rows (store/prune.py)


def backend_factories(config: Config) -> dict[str, Callable[[], TelemetryBackend]]:
    return {
        "nvml": NvmlBackend,
        "rocm": RocmBackend,
        "sim": lambda: SimBackend(config.sim),
    }


class Daemon:
    def __init__(self, config: Config, reload: Callable[[], Config] | None = None) -> None:
        """``reload``: reads the configuration anew (SIGHUP, `systemctl reload gitmd`)."""
        self.config = config
        self.stopped = threading.Event()  # a stop was asked (SIGTERM, SIGINT)
        self.reload_asked = threading.Event()  # a reload was asked (SIGHUP)
        self._wake = threading.Event()  # either: the main loop looks
        self._reload = reload
        self._cleanup: list[tuple[str, Callable[[], None]]] = []

    def _on_stop(self, what: str, fn: Callable[[], None]) -> None:
        self._cleanup.append((what, fn))

    def start(self) -> None:
        # Imported here: the generated protobuf code is only needed once we really serve.
        from gitmd.api.server import ApiServer
        from gitmd.auth.access import Access
        from gitmd.auth.gate import Gate
        from gitmd.auth.peer import CredentialServer
        from gitmd.auth.tokens import TokenAuthority
        from gitmd.experiments.interventions import Interventions
        from gitmd.experiments.live import RESTARTED, ExperimentStore
        from gitmd.experiments.runs import LaunchTrials
        from gitmd.metrics import MetricsServer, build_registry
        from gitmd.service import Service

        cfg = self.config
        d = cfg.daemon
        try:
            ensure_dir(d.state_dir, STATE_DIR_MODE, "state directory")
            ensure_dir(d.socket_path.parent, RUNTIME_DIR_MODE, "socket directory")
            ensure_dir(d.runtime_dir, RUNTIME_DIR_MODE, "runtime directory")
            state_lock = InstanceLock(d.state_dir / "gitmd.lock", "state directory")
            state_lock.acquire()
            self._on_stop("state lock", state_lock.release)
            socket_lock = InstanceLock(d.socket_path.with_name(d.socket_path.name + ".lock"), "socket")
            socket_lock.acquire()
            self._on_stop("socket lock", socket_lock.release)
            clear_stale_socket(d.socket_path)

            store = Store(d.db_path)
            self._on_stop("store", store.close)
            telemetry_store = TelemetryStore(store)

            backend = select_backend(cfg.telemetry.backend, backend_factories(cfg))
            self._on_stop("telemetry backend", backend.close)
            gpus = backend.gpus()
            log.info(
                "telemetry backend %s: %d GPU(s) %s, driver %s",
                backend.name,
                len(gpus),
                ", ".join(g.name for g in gpus),
                backend.driver_version() or "?",
            )

            sampler = Sampler(backend, telemetry_store, cfg.telemetry.interval_s)
            scheduler = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True})
            sampler.schedule(scheduler)
            t = cfg.telemetry
            scheduler.add_job(
                lambda: self._retention(telemetry_store),
                "interval",
                seconds=t.retention_interval_s,
                id=RETENTION_JOB_ID,
            )
            scheduler.add_job(lambda: self._prune(store), "interval", seconds=PRUNE_EVERY_S, id="store-prune")
            if cfg.daemon.checkpoint_every_s > 0:  # the log's checkpoint off the request path
                store.defer_checkpoints()
                scheduler.add_job(store.checkpoint, "interval", seconds=cfg.daemon.checkpoint_every_s,
                                  id="store-checkpoint")  # fmt: skip
            sampler.tick()  # a first reading before we answer anyone
            scheduler.start()
            self._on_stop("scheduler", lambda: scheduler.shutdown(wait=True))

            # Before anything is served: whatever a previous gitmd applied and never promoted is
            # reverted (it may have been killed in the middle of an experiment).
            Interventions(store, backend).recover()
            ExperimentStore(store).abandon_unfinished(RESTARTED)
            LaunchTrials(store).close_open_runs("gitmd restarted during the run")

            capture = self._capture_manager(backend)
            jobs = JobRegistry(
                store, d.runtime_dir, cfg.capture, d.max_jobs_per_user, d.stored_bytes_per_user
            )
            library = Library(store, allowed_env=env_variables())
            self.service = Service(cfg, backend, sampler, telemetry_store, jobs, capture, library)
            scheduler.add_job(self.service.reap, "interval", seconds=REAP_EVERY_S, id=REAP_JOB_ID)
            scheduler.add_job(self.service.cpu_load.sample, "interval", seconds=1.0, id="cpu-load")
            if capture is not None:
                scheduler.add_job(
                    self.service.renew_yields, "interval", seconds=YIELD_RENEW_S, id="renew-yields"
                )
            if capture is not None and cfg.capture.window_every_s > 0:
                scheduler.add_job(
                    self.service.duty_cycle,
                    "interval",
                    seconds=min(cfg.capture.window_every_s, duty.TICK_S),
                    id=DUTY_JOB_ID,
                )
            self._on_stop("watchers", self.service.shutdown)
            if cfg.fleet.url:  # the fleet library: its own thread, never on a registration's path
                from gitmd.fleet import FleetSync

                fleet = FleetSync(cfg.fleet, library, gpus[0].name if gpus else "", backend.driver_version())
                fleet.jobs_frameworks = (
                    self.service.jobs.workload_frameworks
                )  # shown beside a pulled policy's
                fleet.start()
                self.service.loop.d.fleet_miss = fleet.trigger
                self.service.fleet = fleet
                self._on_stop("fleet sync", fleet.stop)
                log.info(
                    "fleet: node %s syncs with %s every %g s",
                    fleet.node,
                    cfg.fleet.url,
                    cfg.fleet.pull_every_s,
                )
            authority = TokenAuthority(cfg.access.token_ttl_s)
            access = Access(
                cfg.access.read_group,
                cfg.access.admin_group,
                cfg.access.allow_device_levers,
                dict(cfg.remote.subjects),
            )
            credentials = CredentialServer(cfg.auth_socket_path, authority)
            credentials.start()
            self._on_stop("credential socket", credentials.stop)
            gate = Gate(authority, access, self.service.audit)
            api = ApiServer(self.service, gate, d.socket_path, d.socket_mode, d.socket_group, cfg.remote)
            api.start()
            self._on_stop("gRPC server", lambda: api.stop(grace_s=2.0))

            if cfg.metrics.port:
                registry = build_registry(sampler, gpus, self.service.metrics_snapshot)
                metrics = MetricsServer(registry, cfg.metrics.address, cfg.metrics.port)
                if metrics.start():
                    self._on_stop("metrics server", metrics.stop)
        except BaseException:
            self.stop()
            raise
        sdnotify.notify(
            f"READY=1\nSTATUS=serving on {d.socket_path}, backend {backend.name}, {len(gpus)} GPU(s)"
        )
        log.info("gitmd %s ready (config: %s)", __version__, cfg.source or "built-in defaults")

    def _capture_manager(self, backend: TelemetryBackend) -> CaptureManager | None:
        try:
            abi = capture_abi.load()
        except (OSError, ValueError) as e:
            log.error("capture is off: the shim ABI header cannot be read (%s)", e)
            return None
        c = self.config.capture
        watcher = ProcessWatcher()
        self._on_stop("process watcher", watcher.close)
        interval_s = c.context_interval_ms / 1000

        def context() -> ContextSampler:
            return ContextSampler(backend, interval_s)

        return CaptureManager(abi, c.kinds, c.flush_interval_ms, watcher, context)

    def _prune(self, store: Store) -> None:
        d = self.config.daemon
        try:
            got = prune(store, time.time_ns(), d.keep_days, d.audit_max_rows)
            windows = prune_windows(store, d.state_dir / "windows")
        except Exception:
            log.exception("pruning the store failed")
            return
        if windows:
            log.info("store: removed the kept capture windows of %d pruned jobs", windows)
        if got:
            log.info(
                "store: pruned %d ended jobs (%d kept reports, %d finished interventions, %d experiments "
                "no policy rests on) and %d audit rows",
                got.jobs, got.reports, got.interventions, got.experiments, got.audit,
            )  # fmt: skip

    def _retention(self, telemetry_store: TelemetryStore) -> None:
        t = self.config.telemetry
        r = telemetry_store.apply_retention(
            time.time_ns(), t.full_rate_retention_s, t.downsampled_retention_s
        )
        if r.downsampled_rows or r.aggregates_dropped:
            log.info(
                "retention: folded %d samples into %d minute rows, dropped %d old minute rows",
                r.downsampled_rows,
                r.aggregates_written,
                r.aggregates_dropped,
            )

    def stop(self) -> None:
        """Undo start in reverse order; one failing step is logged and the rest still run."""
        while self._cleanup:
            what, fn = self._cleanup.pop()
            try:
                fn()
            except Exception:
                log.exception("stopping %s failed", what)

    def reload(self) -> None:
        """SIGHUP: the configuration read anew. The log level applies at once; any other change is
        logged as needing a restart (the running service keeps its settings). A configuration that
        does not parse changes nothing and is logged. Never stops gitmd: before this handler,
        SIGHUP ended it with a clean exit, which systemd does not restart."""
        sdnotify.notify("RELOADING=1")
        try:
            if self._reload is None:
                log.info("SIGHUP: no configuration to read again (started without one)")
                return
            try:
                new = self._reload()
            except GitmdError as e:
                log.error("SIGHUP: configuration not reloaded, nothing changed: %s", e)
                return
            if new.daemon.log_level != self.config.daemon.log_level:
                logging.getLogger().setLevel(new.daemon.log_level.upper())
                log.warning("SIGHUP: log level now %s", new.daemon.log_level)
            old, now = self.config.summary(), new.summary()
            changed = sorted(k for k in {*old, *now} if k != "daemon.log_level" and old.get(k) != now.get(k))
            if changed:
                log.warning("SIGHUP: these settings take effect at the next restart: %s", ", ".join(changed))
            else:
                log.info("SIGHUP: configuration read again; nothing else changed")
            self.config = dataclasses.replace(self.config, daemon=dataclasses.replace(
                self.config.daemon, log_level=new.daemon.log_level))  # fmt: skip
        finally:
            sdnotify.notify("READY=1")

    def run_forever(self) -> int:
        received: list[int] = []

        def request_stop(signum: int, _frame: FrameType | None) -> None:
            # no logging in a signal handler: it runs between two bytecodes of whatever the main
            # thread was doing, logging's own calls included; the loop below says it
            received.append(signum)
            self.stopped.set()
            self._wake.set()

        def request_reload(_signum: int, _frame: FrameType | None) -> None:
            self.reload_asked.set()
            self._wake.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGHUP, request_reload)
        try:
            self.start()
        except GitmdError as e:
            log.error("cannot start: %s", e)
            return 1
        while not self.stopped.is_set():
            self._wake.wait(3600)
            self._wake.clear()
            if self.reload_asked.is_set() and not self.stopped.is_set():
                self.reload_asked.clear()
                self.reload()
        if received:
            log.info("received %s, stopping", signal.Signals(received[0]).name)
        sdnotify.notify("STOPPING=1")
        self.stop()
        log.info("gitmd stopped")
        return 0
