"""AMD backend over ROCm SMI / AMD SMI, through pyrsmi's ``rocml`` module.

pyrsmi answers -1 (or an empty value) for a field it cannot read instead of raising; that is
translated here into a FieldError for that field only. ROCm SMI offers no clock event reasons and,
through pyrsmi, no clocks or temperature: those fields stay absent, and PCIe throughput is the
combined figure (reported as rx, tx absent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gitmd.errors import BackendUnavailableError, TelemetryError
from gitmd.telemetry.backend import GpuInfo, GpuProcess, GpuSample, SampleBuilder, TelemetryBackend
from gitmd.telemetry.procnames import process_name


def _checked(field: str, value: Any) -> Any:
    if value is None or (isinstance(value, int | float) and value < 0) or value == "":
        raise TelemetryError("ROCm SMI could not read it", field=field)
    return value


class RocmBackend(TelemetryBackend):
    name = "rocm"

    def __init__(self, rocml: ModuleType | None = None, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._rocml = rocml
        self._clock_ns = clock_ns
        self._gpus: list[GpuInfo] = []
        self._open = False

    def open(self) -> None:
        if self._rocml is None:
            try:
                from pyrsmi import rocml
            except ImportError as e:
                raise BackendUnavailableError(f"pyrsmi is not installed ({e})") from e
            self._rocml = rocml
        r = self._rocml
        try:
            r.smi_initialize()
        except Exception as e:  # pyrsmi raises its own Exception subclasses and RuntimeError
            raise BackendUnavailableError(f"ROCm SMI did not initialise: {e}") from e
        self._open = True
        try:
            count = int(_checked("device_count", r.smi_get_device_count()))
            self._gpus = [self._info(i) for i in range(count)]
        except Exception as e:
            self.close()
            raise BackendUnavailableError(f"ROCm SMI initialised but could not list GPUs: {e}") from e

    def close(self) -> None:
        if self._open and self._rocml is not None:
            try:
                self._rocml.smi_shutdown()
            except Exception:
                pass
            self._open = False

    def driver_version(self) -> str:
        assert self._rocml is not None
        try:
            return str(self._rocml.smi_get_kernel_version())
        except Exception:
            return ""

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def _info(self, index: int) -> GpuInfo:
        r = self._rocml
        assert r is not None
        try:
            uuid = str(_checked("uuid", r.smi_get_device_uuid(index)))
        except Exception:
            uuid = f"rocm-{index}-{r.smi_get_device_unique_id(index)}"
        try:
            total = int(_checked("memory_total", r.smi_get_device_memory_total(index)))
        except Exception:
            total = 0
        return GpuInfo(
            index=index,
            name=str(_checked("name", r.smi_get_device_name(index))),
            uuid=uuid,
            vendor="amd",
            pci_bus_id=str(r.smi_get_device_pci_id(index)),
            memory_total_bytes=total,
        )

    def sample(self, index: int) -> GpuSample:
        r = self._rocml
        assert r is not None
        info = self._gpus[index]
        b = SampleBuilder(index, info.uuid, self._clock_ns())
        b.set(
            "utilization_gpu_pct",
            lambda: float(_checked("utilization_gpu_pct", r.smi_get_device_utilization(index))),
        )
        b.set(
            "utilization_memory_pct",
            lambda: float(_checked("utilization_memory_pct", r.smi_get_device_memory_busy(index))),
        )
        b.set("power_mw", lambda: 1000.0 * float(_checked("power_mw", r.smi_get_device_average_power(index))))
        b.set(
            "memory_used_bytes",
            lambda: int(_checked("memory_used_bytes", r.smi_get_device_memory_used(index))),
        )
        b.values["memory_total_bytes"] = info.memory_total_bytes or None
        b.set(
            "pcie_rx_bytes_per_s",
            lambda: float(_checked("pcie_throughput", r.smi_get_device_pcie_throughput(index))),
        )
        # pyrsmi lists compute pids host-wide, not per device: attribute them only on one-GPU hosts.
        if len(self._gpus) == 1:
            with b.reading("processes"):
                pids = r.smi_get_device_compute_process()
                b.values["processes"] = tuple(GpuProcess(pid=int(p), name=process_name(int(p))) for p in pids)
        return b.build()
