"""Prometheus exporter on a local port, names in the dcgm-exporter style (gitm_gpu_*).

Values come from the sampler's latest readings at scrape time; nothing is sampled for a scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gitmd.telemetry.backend import CLOCK_EVENT_REASONS, GpuInfo, encode_reasons
from gitmd.telemetry.sampler import Sampler

log = logging.getLogger(__name__)

LABELS = ["gpu", "uuid", "modelName"]
# (metric name, help, sample attribute, scale)
_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("gitm_gpu_utilization_pct", "GPU utilization (%)", "utilization_gpu_pct", 1.0),
    ("gitm_gpu_mem_copy_utilization_pct", "Memory utilization (%)", "utilization_memory_pct", 1.0),
    ("gitm_gpu_sm_clock_mhz", "SM clock (MHz)", "sm_clock_mhz", 1.0),
    ("gitm_gpu_mem_clock_mhz", "Memory clock (MHz)", "mem_clock_mhz", 1.0),
    ("gitm_gpu_sm_clock_max_mhz", "Maximum SM clock (MHz)", "sm_clock_max_mhz", 1.0),
    ("gitm_gpu_power_usage_w", "Power draw (W)", "power_mw", 1e-3),
    ("gitm_gpu_power_limit_w", "Enforced power limit (W)", "power_limit_mw", 1e-3),
    ("gitm_gpu_temp_c", "GPU temperature (C)", "temperature_c", 1.0),
    ("gitm_gpu_fb_used_bytes", "Framebuffer memory used (bytes)", "memory_used_bytes", 1.0),
    ("gitm_gpu_fb_total_bytes", "Framebuffer memory total (bytes)", "memory_total_bytes", 1.0),
    ("gitm_gpu_pcie_rx_bytes_per_s", "PCIe receive throughput (bytes/s)", "pcie_rx_bytes_per_s", 1.0),
    ("gitm_gpu_pcie_tx_bytes_per_s", "PCIe transmit throughput (bytes/s)", "pcie_tx_bytes_per_s", 1.0),
)


class TelemetryCollector(Collector):
    def __init__(self, sampler: Sampler, gpus: list[GpuInfo]) -> None:
        self.sampler = sampler
        self.names = {g.index: g.name for g in gpus}

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
            labels = [str(s.gpu_index), s.uuid, self.names.get(s.gpu_index, "")]
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
        yield CounterMetricFamily("gitm_daemon_samples", "GPU samples taken", value=st.samples)
        yield CounterMetricFamily(
            "gitm_daemon_sample_field_errors", "Fields that failed to read", value=st.field_errors
        )
        yield CounterMetricFamily(
            "gitm_daemon_store_failures", "Sample batches not stored", value=st.store_failures
        )
        yield GaugeMetricFamily(
            "gitm_daemon_last_tick_seconds", "Duration of the last sampling tick", value=st.last_tick_s
        )


def build_registry(sampler: Sampler, gpus: list[GpuInfo]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TelemetryCollector(sampler, gpus))
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
