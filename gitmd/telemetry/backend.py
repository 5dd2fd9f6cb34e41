"""The telemetry backend base class, the values it returns, and the probing factory.

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

log = logging.getLogger(__name__)

# Clock event ("throttle") reasons, gitmd's names for NVML's nvmlClocksEventReason bits.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
REASON_BITS = {name: bit for bit, name in CLOCK_EVENT_REASONS}
# Reasons that mean the GPU ran slower than it could have while it had work.
THROTTLING_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reason bits set in ``mask``; unknown bits come out as ``bit_0x...``."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


def encode_reasons(names: tuple[str, ...] | list[str]) -> int:
    mask = 0
    for name in names:
        if name in REASON_BITS:
            mask |= REASON_BITS[name]
        elif name.startswith("bit_"):
            mask |= int(name[4:], 16)
    return mask


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
class GpuProcess:
    pid: int
    used_memory_bytes: int | None = None
    name: str = ""


@dataclass(frozen=True)
class ProcessUtilization:
    """One of the vendor's per-process utilization samples (NVML takes them every ~1/6 s)."""

    pid: int
    ts_us: int  # unix time, microseconds
    sm_util_pct: float


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU. Every metric is optional: None means it could not be read."""

    gpu_index: int
    uuid: str
    ts_ns: int  # unix time, ns
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    power_mw: float | None = None
    power_limit_mw: float | None = None
    temperature_c: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    clock_event_reasons: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    errors: tuple[FieldError, ...] = ()
    downsampled: bool = False
    aggregated_samples: int = 1

    @property
    def throttled(self) -> bool:
        return any(r in THROTTLING_REASONS for r in self.clock_event_reasons)


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
