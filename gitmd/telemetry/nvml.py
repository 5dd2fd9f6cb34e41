"""NVIDIA backend over NVML, through the ``pynvml`` module of the nvidia-ml-py package.

Each field is read on its own: NVML answers NOT_SUPPORTED for some fields on some boards, and that
must cost only that field. NVMLError leaves this module as TelemetryError.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gitmd.errors import BackendUnavailableError, TelemetryError
from gitmd.telemetry.backend import (
    GpuInfo,
    GpuProcess,
    GpuSample,
    ProcessUtilization,
    SampleBuilder,
    TelemetryBackend,
    decode_reasons,
)
from gitmd.telemetry.procnames import process_name

# Newer bindings name it "clocks event reasons"; older ones "clocks throttle reasons". Either may be
# absent (set to None) in a given binding version, so probe both, in this order.
_REASON_FUNCTIONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend(TelemetryBackend):
    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._nvml = nvml
        self._clock_ns = clock_ns
        self._handles: list[Any] = []
        self._gpus: list[GpuInfo] = []
        self._driver = ""
        self._reasons_fn: Callable[[Any], int] | None = None
        self._open = False

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as e:
                raise BackendUnavailableError(f"pynvml is not installed ({e})") from e
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise BackendUnavailableError(f"NVML did not initialise: {e}") from e
        except OSError as e:  # libnvidia-ml.so missing is an OSError in some binding versions
            raise BackendUnavailableError(f"NVML library not loadable: {e}") from e
        self._open = True
        try:
            self._driver = _text(nv.nvmlSystemGetDriverVersion())
            count = nv.nvmlDeviceGetCount()
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._gpus = [self._info(i, h) for i, h in enumerate(self._handles)]
        except nv.NVMLError as e:
            self.close()
            raise BackendUnavailableError(f"NVML initialised but could not list GPUs: {e}") from e
        for fn_name in _REASON_FUNCTIONS:
            fn = getattr(nv, fn_name, None)
            if callable(fn):
                self._reasons_fn = fn
                break

    def close(self) -> None:
        if self._open and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._open = False

    def driver_version(self) -> str:
        return self._driver

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    # -- reads -------------------------------------------------------------------------------
    def _call(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        nv = self._nvml
        assert nv is not None
        try:
            return fn(*args)
        except nv.NVMLError as e:
            raise TelemetryError(f"NVML: {e}", field=field) from e

    def _optional(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return self._call(field, fn, *args)
        except TelemetryError:
            return None

    def _info(self, index: int, h: Any) -> GpuInfo:
        nv = self._nvml
        assert nv is not None
        pci = self._optional("pci", nv.nvmlDeviceGetPciInfo, h)
        mem = self._optional("memory", nv.nvmlDeviceGetMemoryInfo, h)
        return GpuInfo(
            index=index,
            name=_text(self._call("name", nv.nvmlDeviceGetName, h)),
            uuid=_text(self._call("uuid", nv.nvmlDeviceGetUUID, h)),
            vendor="nvidia",
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            memory_total_bytes=int(mem.total) if mem is not None else 0,
            sm_clock_max_mhz=self._optional(
                "sm_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM
            ),
            mem_clock_max_mhz=self._optional(
                "mem_clock_max", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM
            ),
            power_limit_mw=self._optional("power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h),
        )

    def sample(self, index: int) -> GpuSample:
        return self._read(index, fast=False)

    def fast_sample(self, index: int) -> GpuSample:
        return self._read(index, fast=True)

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]:
        nv = self._nvml
        assert nv is not None
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(self._handles[index], since_us)
        except nv.NVMLError:  # NOT_FOUND when no process ran since; NOT_SUPPORTED on some boards
            return []
        except Exception:  # a binding without the function, or a ctypes failure
            return []
        return [ProcessUtilization(int(x.pid), int(x.timeStamp), float(x.smUtil)) for x in samples]

    def _read(self, index: int, fast: bool) -> GpuSample:
        nv = self._nvml
        assert nv is not None
        h = self._handles[index]
        info = self._gpus[index]
        b = SampleBuilder(index, info.uuid, self._clock_ns())
        call = self._call

        with b.reading("utilization"):
            util = call("utilization", nv.nvmlDeviceGetUtilizationRates, h)
            b.values["utilization_gpu_pct"] = float(util.gpu)
            b.values["utilization_memory_pct"] = float(util.memory)
        b.set(
            "sm_clock_mhz",
            lambda: float(call("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
        )
        b.set(
            "mem_clock_mhz",
            lambda: float(call("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)),
        )
        b.values["sm_clock_max_mhz"] = info.sm_clock_max_mhz
        b.values["mem_clock_max_mhz"] = info.mem_clock_max_mhz
        b.set("power_mw", lambda: float(call("power_mw", nv.nvmlDeviceGetPowerUsage, h)))
        b.set("power_limit_mw", lambda: float(call("power_limit_mw", nv.nvmlDeviceGetEnforcedPowerLimit, h)))
        b.set(
            "temperature_c",
            lambda: float(call("temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)),
        )
        with b.reading("memory"):
            mem = call("memory", nv.nvmlDeviceGetMemoryInfo, h)
            b.values["memory_used_bytes"] = int(mem.used)
            b.values["memory_total_bytes"] = int(mem.total)
        if fast:
            with b.reading("clock_event_reasons"):
                if self._reasons_fn is not None:
                    b.values["clock_event_reasons"] = decode_reasons(
                        int(call("clock_event_reasons", self._reasons_fn, h))
                    )
            with b.reading("processes"):
                procs = call("processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
                b.values["processes"] = tuple(GpuProcess(pid=int(p.pid)) for p in procs)
            return b.build()
        # NVML reports PCIe throughput in KB/s over a 20 ms window.
        b.set(
            "pcie_rx_bytes_per_s",
            lambda: 1024.0 * call("pcie_rx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES),
        )
        b.set(
            "pcie_tx_bytes_per_s",
            lambda: 1024.0 * call("pcie_tx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES),
        )
        with b.reading("clock_event_reasons"):
            if self._reasons_fn is None:
                raise TelemetryError("this NVML binding offers no clock event reason function")
            b.values["clock_event_reasons"] = decode_reasons(
                int(call("clock_event_reasons", self._reasons_fn, h))
            )
        with b.reading("processes"):
            procs = call("processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
            b.values["processes"] = tuple(
                GpuProcess(
                    pid=int(p.pid),
                    used_memory_bytes=_memory_or_none(p.usedGpuMemory),
                    name=process_name(int(p.pid)),
                )
                for p in procs
            )
        return b.build()


def _memory_or_none(value: Any) -> int | None:
    # NVML reports NVML_VALUE_NOT_AVAILABLE (all ones) when it may not say, e.g. inside containers.
    if value is None:
        return None
    v = int(value)
    return None if v >= (1 << 63) else v
