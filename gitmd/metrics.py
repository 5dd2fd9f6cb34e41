"""Prometheus exporter on a local port, following the exporter conventions
(https://prometheus.io/docs/practices/naming/): base units in the names (``_hertz``, ``_watts``,
``_celsius``, ``_bytes``, ``_seconds``, ``_ratio`` 0..1), ``_total`` on every counter, and the GPU
families labelled as dcgm-exporter labels its own (``gpu``, ``UUID``, ``pci_bus_id``, ``modelName``,
``Hostname``), so that the two join.

Two collectors, both read at scrape time and neither samples nor opens anything for a scrape:

- TelemetryCollector: the sampler's latest readings of each GPU (gitm_gpu_*) and the sampler's own
  counters (gitm_daemon_*).
- StateCollector: what only gitmd knows (jobs, capture windows, experiments, launch trials, policies,
  interventions, pause, each running job's step time), from a snapshot function it is given
  (Service.metrics_snapshot in the daemon): this module imports neither the store nor the loop.

docs/operations.md lists the families and the renames from the names before the conventions.
"""

from __future__ import annotations

import logging
import platform
import socket
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gitmd import __version__
from gitmd.loop.snapshot import StateSnapshot
from gitmd.telemetry.backend import CLOCK_EVENT_REASONS, GpuInfo, encode_reasons
from gitmd.telemetry.sampler import Sampler

log = logging.getLogger(__name__)

# dcgm-exporter's label names (its `device`, nvidia<minor>, is not known to gitmd's backends)
LABELS = ["gpu", "UUID", "pci_bus_id", "modelName", "Hostname"]
# (metric name, help, sample attribute, scale to the base unit)
_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("gitm_gpu_utilization_ratio", "GPU utilization (0..1)", "utilization_gpu_pct", 0.01),
    (
        "gitm_gpu_mem_copy_utilization_ratio",
        "Memory (copy) utilization (0..1)",
        "utilization_memory_pct",
        0.01,
    ),
    ("gitm_gpu_sm_clock_hertz", "SM clock (Hz)", "sm_clock_mhz", 1e6),
    ("gitm_gpu_mem_clock_hertz", "Memory clock (Hz)", "mem_clock_mhz", 1e6),
    ("gitm_gpu_sm_clock_max_hertz", "Maximum SM clock (Hz)", "sm_clock_max_mhz", 1e6),
    ("gitm_gpu_mem_clock_max_hertz", "Maximum memory clock (Hz)", "mem_clock_max_mhz", 1e6),
    ("gitm_gpu_power_usage_watts", "Power draw (W)", "power_mw", 1e-3),
    ("gitm_gpu_power_limit_watts", "Enforced power limit (W)", "power_limit_mw", 1e-3),
    ("gitm_gpu_temperature_celsius", "GPU temperature (degrees Celsius)", "temperature_c", 1.0),
    ("gitm_gpu_fb_used_bytes", "Framebuffer memory used (bytes)", "memory_used_bytes", 1.0),
    ("gitm_gpu_fb_total_bytes", "Framebuffer memory total (bytes)", "memory_total_bytes", 1.0),
    (
        "gitm_gpu_pcie_rx_bytes_per_second",
        "PCIe receive throughput (bytes/s, the vendor's short-interval reading)",
        "pcie_rx_bytes_per_s",
        1.0,
    ),
    (
        "gitm_gpu_pcie_tx_bytes_per_second",
        "PCIe transmit throughput (bytes/s, the vendor's short-interval reading)",
        "pcie_tx_bytes_per_s",
        1.0,
    ),
)

# The label values always exported (0 when none), in the store's vocabulary (gitmd/store/migrations);
# a value the store holds beyond these is exported too.
JOB_STATES = ("registered", "running", "exited", "lost")
EXPERIMENT_OUTCOMES = ("promoted", "reverted", "abandoned", "failed")  # an experiment's end states
TRIAL_OUTCOMES = ("promoted", "reverted", "abandoned")  # a launch trial's end states
POLICY_STATUSES = ("candidate", "validated", "pinned", "reverted")
IN_FORCE = ("applying", "applied", "promoted")  # interventions whose change holds now


class TelemetryCollector(Collector):
    def __init__(self, sampler: Sampler, gpus: list[GpuInfo], hostname: str) -> None:
        self.sampler = sampler
        self.gpus = {g.index: g for g in gpus}
        self.hostname = hostname

    def _labels(self, index: int, uuid: str) -> list[str]:
        g = self.gpus.get(index)
        return [str(index), uuid, g.pci_bus_id if g else "", g.name if g else "", self.hostname]

    def collect(self) -> Iterator[Any]:
        latest = self.sampler.latest()
        families = {name: GaugeMetricFamily(name, doc, labels=LABELS) for name, doc, _, _ in _GAUGES}
        reasons_mask = GaugeMetricFamily(
            "gitm_gpu_clocks_event_reasons",
            "Clock event (throttle) reasons bitmask, NVML layout",
            labels=LABELS,
        )
        reason = GaugeMetricFamily(
            "gitm_gpu_clocks_event_reason_active", "1 while the reason holds", labels=[*LABELS, "reason"]
        )
        procs = GaugeMetricFamily("gitm_gpu_processes", "Compute processes on the GPU", labels=LABELS)
        for s in latest:
            labels = self._labels(s.gpu_index, s.uuid)
            for name, _, attr, scale in _GAUGES:
                v = getattr(s, attr)
                if v is not None:
                    families[name].add_metric(labels, float(v) * scale)
            reasons_mask.add_metric(labels, float(encode_reasons(s.clock_event_reasons)))
            for _, rname in CLOCK_EVENT_REASONS:
                reason.add_metric([*labels, rname], 1.0 if rname in s.clock_event_reasons else 0.0)
            procs.add_metric(labels, float(len(s.processes)))
        yield from families.values()
        yield reasons_mask
        yield reason
        yield procs
        st = self.sampler.stats
        yield CounterMetricFamily("gitm_daemon_samples_total", "GPU samples taken", value=st.samples)
        yield CounterMetricFamily(
            "gitm_daemon_sample_field_errors_total", "Fields that failed to read", value=st.field_errors
        )
        yield CounterMetricFamily(
            "gitm_daemon_store_failures_total", "Sample batches not stored", value=st.store_failures
        )
        yield GaugeMetricFamily(
            "gitm_daemon_last_tick_seconds", "Duration of the last sampling tick", value=st.last_tick_s
        )


def _by_label(name: str, doc: str, label: str, counts: Mapping[str, int], known: tuple[str, ...]) -> Any:
    g = GaugeMetricFamily(name, doc, labels=[label])
    for value in (*known, *sorted(set(counts) - set(known))):
        g.add_metric([value], float(counts.get(value, 0)))
    return g


def _ended(name: str, doc: str, counts: Mapping[str, int], outcomes: tuple[str, ...]) -> Any:
    c = CounterMetricFamily(name, doc, labels=["outcome"])
    for outcome in outcomes:
        c.add_metric([outcome], float(counts.get(outcome, 0)))
    return c


class StateCollector(Collector):
    """gitmd's own state, from ``snapshot`` (cheap reads: counts of the store's rows, the loop's
    in-memory state). A snapshot that fails is logged (once until one succeeds again) and leaves
    gitm_state_up at 0; the GPU families of the same scrape are not lost with it."""

    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self.snapshot = snapshot
        self._failing = False

    def collect(self) -> Iterator[Any]:
        info = GaugeMetricFamily(
            "gitm_build_info",
            "gitmd's version and the Python it runs on (always 1)",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1.0)
        yield info
        try:
            s = self.snapshot()
        except Exception as e:
            if not self._failing:
                log.warning("metrics: gitmd's state could not be read for a scrape: %s", e)
            self._failing = True
            yield GaugeMetricFamily("gitm_state_up", "1 when gitmd's own state was read", value=0.0)
            return
        self._failing = False
        yield GaugeMetricFamily("gitm_state_up", "1 when gitmd's own state was read", value=1.0)
        yield from state_families(s)


def state_families(s: StateSnapshot) -> Iterator[Any]:
    if s.fleet is not None:
        for name, doc in (
            ("pushed", "Events this node pushed to the fleet store"),
            ("pulled", "Other nodes' events applied here"),
            ("refused", "Other nodes' events refused here (checked as an import is)"),
            ("errors", "Sync rounds that failed (the fleet store away or broken)"),
        ):
            yield CounterMetricFamily(f"gitm_fleet_{name}", doc, value=s.fleet.get(name, 0.0))
        yield GaugeMetricFamily(
            "gitm_fleet_outbox", "Events waiting for the fleet store", value=s.fleet.get("outbox", 0.0)
        )
        if "lag_seconds" in s.fleet:
            yield GaugeMetricFamily(
                "gitm_fleet_lag_seconds",
                "Seconds since the last sync round that worked",
                value=s.fleet["lag_seconds"],
            )
    yield GaugeMetricFamily(
        "gitm_paused", "1 while gitmd is paused (gitmctl pause): no window, no trial", value=float(s.paused)
    )
    yield _by_label("gitm_jobs", "Jobs in the store by state", "state", s.jobs, JOB_STATES)
    if s.capture_windows is not None:
        yield CounterMetricFamily(
            "gitm_capture_windows_total",
            "Capture windows opened since gitmd started (duty, experiment and trace windows)",
            value=s.capture_windows,
        )
    yield CounterMetricFamily(
        "gitm_experiments_started_total", "Live experiments started", value=sum(s.experiments.values())
    )
    yield _ended(
        "gitm_experiments_ended_total",
        "Live experiments ended, by outcome",
        s.experiments,
        EXPERIMENT_OUTCOMES,
    )
    yield CounterMetricFamily(
        "gitm_launch_trials_started_total", "Launch trials started", value=sum(s.launch_trials.values())
    )
    yield _ended(
        "gitm_launch_trials_ended_total", "Launch trials ended, by outcome", s.launch_trials, TRIAL_OUTCOMES
    )
    yield _by_label(
        "gitm_policies", "Policies in the library by status", "status", s.policies, POLICY_STATUSES
    )
    in_force = {k: v for k, v in s.interventions.items() if k in IN_FORCE}
    yield _by_label(
        "gitm_interventions_in_force",
        "Interventions whose change holds now, by state",
        "state",
        in_force,
        IN_FORCE,
    )
    step = GaugeMetricFamily(
        "gitm_job_step_seconds",
        "Median step time of a tracked job in its latest capture window that found its step",
        labels=["job_id", "name"],
    )
    cost = GaugeMetricFamily(
        "gitm_job_capture_cost_ratio",
        "Share of a job's time gitmd's capture costs it while its observation lasts (0..1): "
        "its last window's launch rate times capture.launch_cost_us, an upper bound",
        labels=["job_id", "name"],
    )
    for j in s.running_jobs:
        if j.step_s is not None:
            step.add_metric([j.job_id, j.name], j.step_s)
        if j.capture_cost_ratio is not None:
            cost.add_metric([j.job_id, j.name], j.capture_cost_ratio)
    yield step
    yield cost


def build_registry(
    sampler: Sampler,
    gpus: list[GpuInfo],
    snapshot: Callable[[], StateSnapshot] | None = None,
    hostname: str | None = None,
) -> CollectorRegistry:
    """``snapshot``: gitmd's own state (Service.metrics_snapshot); None: the GPU families only.
    ``hostname``: the Hostname label (default: this host's name, as dcgm-exporter sets it)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TelemetryCollector(sampler, gpus, hostname or socket.gethostname()))
    if snapshot is not None:
        registry.register(StateCollector(snapshot))
        # gitmd's own cost on the host: gitm_process_cpu_seconds_total, _resident_memory_bytes,
        # _open_fds, _start_time_seconds (prometheus_client's, from /proc/self)
        ProcessCollector(namespace="gitm", registry=registry)
    return registry


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, address: str, port: int) -> None:
        self.registry = registry
        self.address = address
        self.port = port
        self._server: Any = None

    def start(self) -> bool:
        """Serve /metrics; on a busy port log why and carry on (metrics are auxiliary)."""
        try:
            self._server, _thread = start_http_server(self.port, addr=self.address, registry=self.registry)
        except OSError as e:
            log.error(
                "metrics: cannot listen on %s:%d (%s); Prometheus metrics are off", self.address, self.port, e
            )
            return False
        log.info("metrics: serving http://%s:%d/metrics", self.address, self.port)
        return True

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
