"""The telemetry backend base class, the values it returns (defined in gitmd.records), and the
probing factory.

Backends translate vendor errors at this boundary: a field that cannot be read becomes a
FieldError inside the sample, never an exception that drops the rest of it.
"""

from __future__ import annotations

import abc
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from gitmd.errors import BackendUnavailableError, TelemetryError
from gitmd.records import (
    CLOCK_EVENT_REASONS,
    REASON_BITS,
    THROTTLING_REASONS,
    FieldError,
    GpuProcess,
    GpuSample,
    decode_reasons,
    encode_reasons,
)

# The values every backend returns (GpuSample and its parts) and the clock event reasons are plain
# data that analysis reads too: they live in gitmd.records and are re-exported from here.
__all__ = [
    "BYTE_METRICS",
    "CLOCK_EVENT_REASONS",
    "FLOAT_METRICS",
    "REASON_BITS",
    "THROTTLING_REASONS",
    "FieldError",
    "GpuInfo",
    "GpuProcess",
    "GpuSample",
    "ProcessUtilization",
    "SampleBuilder",
    "TelemetryBackend",
    "decode_reasons",
    "encode_reasons",
    "select_backend",
    "translating",
]

log = logging.getLogger(__name__)

# The optional metrics of a GpuSample: float-valued, then byte counts. One list for the store, the
# API and the exporter.
FLOAT_METRICS = (
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "power_mw",
    "power_limit_mw",
    "temperature_c",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
)
BYTE_METRICS = ("memory_used_bytes", "memory_total_bytes")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    vendor: str
    pci_bus_id: str = ""
    memory_total_bytes: int = 0
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    power_limit_mw: float | None = None


@dataclass(frozen=True)
class ProcessUtilization:
    """One of the vendor's per-process utilization samples (NVML takes them every ~1/6 s)."""

    pid: int
    ts_us: int  # unix time, microseconds
    sm_util_pct: float


class SampleBuilder:
    """Collects the fields of one sample; each read is isolated so one failure drops only itself."""

    def __init__(self, gpu_index: int, uuid: str, ts_ns: int) -> None:
        self.values: dict[str, Any] = {"gpu_index": gpu_index, "uuid": uuid, "ts_ns": ts_ns}
        self.errors: list[FieldError] = []

    @contextmanager
    def reading(self, name: str) -> Iterator[None]:
        try:
            yield
        except TelemetryError as e:
            self.errors.append(FieldError(e.field or name, str(e)))
        except Exception as e:  # a vendor binding raising something unexpected
            self.errors.append(FieldError(name, f"{type(e).__name__}: {e}"))

    def set(self, name: str, read: Callable[[], Any]) -> None:
        with self.reading(name):
            self.values[name] = read()

    def build(self) -> GpuSample:
        return GpuSample(**self.values, errors=tuple(self.errors))


class TelemetryBackend(abc.ABC):
    """What every GPU vendor backend provides. Open once, sample often, close at shutdown."""

    name: str = "abstract"

    @abc.abstractmethod
    def open(self) -> None:
        """Initialise the vendor library; raise BackendUnavailableError when it is not there."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def driver_version(self) -> str: ...

    @abc.abstractmethod
    def gpus(self) -> list[GpuInfo]:
        """Static facts, read once at open; index order is the vendor's."""

    @abc.abstractmethod
    def sample(self, index: int) -> GpuSample:
        """A fresh reading of GPU ``index``. Must not raise for a field that fails."""

    def fast_sample(self, index: int) -> GpuSample:
        """A reading cheap enough to take every few tens of ms during a capture window: clocks,
        power, temperature, clock event reasons, utilization and the pids of its processes. Fields
        that are slow to read (PCIe throughput blocks for 20 ms on NVML) may be left out."""
        return self.sample(index)

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]:
        """Per-process utilization samples of GPU ``index`` newer than ``since_us``; [] where the
        vendor library offers none. Must not raise."""
        return []

    # -- device controls (device levers; off unless access.allow_device_levers) ----------------
    # Only the simulated backend implements them: the project never changes a real card's power
    # limit or clocks in its tests or benchmarks, and no NVML setter ships untested.
    def power_limit_mw(self, index: int) -> int:
        raise BackendUnavailableError(f"the {self.name} backend does not control power limits")

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        raise BackendUnavailableError(f"the {self.name} backend does not control power limits")

    def locked_sm_clock_mhz(self, index: int) -> int | None:
        raise BackendUnavailableError(f"the {self.name} backend does not control clocks")

    def lock_sm_clock_mhz(self, index: int, mhz: int | None) -> None:
        """Lock the SM clock at ``mhz``; None unlocks it."""
        raise BackendUnavailableError(f"the {self.name} backend does not control clocks")


F = TypeVar("F", bound=Callable[..., Any])


def translating(
    vendor_error: type[BaseException], describe: Callable[[BaseException], str]
) -> Callable[[F], F]:
    """Decorator: vendor exceptions leave as TelemetryError (the message says what failed)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except vendor_error as e:
                raise TelemetryError(describe(e), field=fn.__name__.lstrip("_")) from e

        return inner  # type: ignore[return-value]

    return wrap


def select_backend(choice: str, factories: dict[str, Callable[[], TelemetryBackend]]) -> TelemetryBackend:
    """Open the configured backend, or with "auto" the first that opens: nvml, rocm, then sim."""
    if choice != "auto":
        backend = factories[choice]()
        backend.open()
        return backend
    reasons = []
    for name in ("nvml", "rocm", "sim"):
        backend = factories[name]()
        try:
            backend.open()
        except BackendUnavailableError as e:
            reasons.append(f"{name}: {e}")
            log.debug("backend %s not available: %s", name, e)
            continue
        if name == "sim" and reasons:
            log.info(
                "no GPU telemetry library answered (%s); using the simulated backend", "; ".join(reasons)
            )
        return backend
    raise BackendUnavailableError("no telemetry backend could be opened: " + "; ".join(reasons))
