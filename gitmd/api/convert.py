"""Conversions between the service's dataclasses and protobuf messages; plain functions."""

from __future__ import annotations

from typing import Any

from gitmd.api.pb import pb
from gitmd.service import Status
from gitmd.telemetry.backend import GpuInfo, GpuSample

_OPTIONAL_SAMPLE_FIELDS = (
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "power_mw",
    "power_limit_mw",
    "temperature_c",
    "memory_used_bytes",
    "memory_total_bytes",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
)


def status_to_pb(s: Status) -> Any:
    return pb.GetStatusResponse(
        version=s.version,
        uptime_s=s.uptime_s,
        started_at_unix_ns=s.started_at_ns,
        backend=s.backend,
        gpu_count=s.gpu_count,
        driver_version=s.driver_version,
        socket_path=s.socket_path,
        state_dir=s.state_dir,
        sample_interval_s=s.sample_interval_s,
        samples_taken=s.samples_taken,
        sample_field_errors=s.sample_field_errors,
        config=s.config,
        pid=s.pid,
    )


def gpu_to_pb(g: GpuInfo) -> Any:
    msg = pb.Gpu(
        index=g.index,
        name=g.name,
        uuid=g.uuid,
        pci_bus_id=g.pci_bus_id,
        vendor=g.vendor,
        memory_total_bytes=g.memory_total_bytes,
    )
    for f in ("sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_mw"):
        v = getattr(g, f)
        if v is not None:
            setattr(msg, f, v)
    return msg


def sample_to_pb(s: GpuSample) -> Any:
    msg = pb.TelemetrySample(
        gpu_index=s.gpu_index,
        uuid=s.uuid,
        ts_unix_ns=s.ts_ns,
        clock_event_reasons=list(s.clock_event_reasons),
        downsampled=s.downsampled,
        aggregated_samples=s.aggregated_samples,
    )
    for f in _OPTIONAL_SAMPLE_FIELDS:
        v = getattr(s, f)
        if v is not None:
            setattr(msg, f, v)
    for p in s.processes:
        proc = msg.processes.add(pid=p.pid, name=p.name)
        if p.used_memory_bytes is not None:
            proc.used_memory_bytes = p.used_memory_bytes
    for e in s.errors:
        msg.errors.add(field=e.field, message=e.message)
    return msg
