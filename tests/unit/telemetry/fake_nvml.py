"""A fake ``pynvml`` module for unit tests only: same names, scripted answers, injectable failures."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(text or f"NVML error {value}")
        self.value = value


NVML_ERROR_NOT_SUPPORTED = 3
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1


class FakeNvml:
    """Build with per-device answers; ``fail`` maps function name -> error value."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES

    def __init__(
        self, devices: int = 1, reasons_fn: str | None = "event", init_error: int | None = None
    ) -> None:
        self.devices = devices
        self.fail: dict[str, int] = {}
        self.reasons = 0x4  # sw_power_cap
        self.init_error = init_error
        self.shutdowns = 0
        self.procs: list[Any] = [SimpleNamespace(pid=1234, usedGpuMemory=2 << 30)]
        if reasons_fn == "event":
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons
            self.nvmlDeviceGetCurrentClocksThrottleReasons = None
        elif reasons_fn == "throttle":
            self.nvmlDeviceGetCurrentClocksEventReasons = None
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = None
            self.nvmlDeviceGetCurrentClocksThrottleReasons = None

    def _maybe_fail(self, name: str) -> None:
        if name in self.fail:
            raise NVMLError(self.fail[name], f"{name}: Not Supported")

    def _reasons(self, h: int) -> int:
        self._maybe_fail("reasons")
        return self.reasons

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error, "Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-fake-{h}".encode()

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=b"00000000:19:00.0")

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._maybe_fail("memory")
        return SimpleNamespace(used=5 << 30, total=141 << 30)

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return 1980 if kind == NVML_CLOCK_SM else 3201

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._maybe_fail("utilization")
        return SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._maybe_fail("clock")
        return 1755 if kind == NVML_CLOCK_SM else 3201

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._maybe_fail("power")
        return 612_345

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._maybe_fail("temperature")
        return 58

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        self._maybe_fail("pcie")
        return 2000 if counter == NVML_PCIE_UTIL_RX_BYTES else 500

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._maybe_fail("processes")
        return self.procs
