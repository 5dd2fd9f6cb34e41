"""The values capture and telemetry hand to analysis: plain data, constants and pure helpers.

Capture (rings, decoding, windows), telemetry (NVML, ROCm SMI, the sampler) and the loop build these
values; analysis only reads them. This module imports nothing from gitmd, so analysis depends on it
and on nothing that reads a ring or a GPU. Their old homes (gitmd.capture.decode, .windows,
.context, .ring and gitmd.telemetry.backend) re-export them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

# -- a capture window's records -----------------------------------------------------------------


@dataclass(frozen=True)
class RingStatus:
    pid: int
    start_time_ticks: int
    status: str
    reason: str
    window_id: int
    records_written: int
    ring_drops: int
    cupti_drops: int
    missing_timestamps: int
    buffers_completed: int
    windows_opened: int
    cupti_version: int
    capacity: int
    pending: int
    detaches: int = 0  # windows closed with cuptiFinalize; the others closed with their kinds disabled
    created_real_ns: int = 0  # the ring's creation by the shim (InitializeInjection, the first CUDA call)


@dataclass
class Decoded:
    """One process's records, split by type; each array has the shim's payload dtype of its type
    (gitmd.capture.abi). gitmd.capture.decode.Decoded, what capture builds, is this with
    ``hostsrcs`` defaulting to an empty array of that layout; here it must be given."""

    kernels: np.ndarray
    memcpys: np.ndarray
    memsets: np.ndarray
    syncs: np.ndarray
    memory: np.ndarray
    clocks: np.ndarray
    windows: np.ndarray
    payloads: np.ndarray
    names: dict[int, str] = field(default_factory=dict)
    # host addresses of host-to-device copies (GITM_REC_HOSTSRC); empty in captures made before
    # they existed
    hostsrcs: np.ndarray = field(kw_only=True)

    @property
    def count(self) -> int:
        return sum(len(a) for a in (self.kernels, self.memcpys, self.memsets, self.syncs, self.memory))

    def timed(self) -> Decoded:
        """Without the kernels, copies and memsets CUPTI gave no timestamps (start 0, or an end
        before the start): the shim counts those as missing timestamps; timing analysis skips them."""

        def ok(a: np.ndarray) -> np.ndarray:
            good = (a["start_ns"] > 0) & (a["end_ns"] >= a["start_ns"])
            return a if bool(good.all()) else a[good]

        return dataclasses.replace(
            self, kernels=ok(self.kernels), memcpys=ok(self.memcpys), memsets=ok(self.memsets)
        )

    def within(self, lo: int, hi: int) -> Decoded:
        """The kernels, copies, memsets and syncs that ran during [lo, hi) (CUPTI clock), and the
        allocations made in it: what a window's analysis counts (its recorded run of steps,
        gitmd.analysis.steps.steady_span). Timed records only."""

        def during(a: np.ndarray) -> np.ndarray:
            if not len(a):
                return a
            keep = (a["end_ns"].astype(np.int64) > lo) & (a["start_ns"].astype(np.int64) < hi)
            return a if bool(keep.all()) else a[keep]

        m = self.memory
        if len(m):
            t = m["start_ns"].astype(np.int64)
            m = m[(t >= lo) & (t < hi)]
        return dataclasses.replace(
            self,
            kernels=during(self.kernels),
            memcpys=during(self.memcpys),
            memsets=during(self.memsets),
            syncs=during(self.syncs),
            memory=m,
        )


# -- what else happened while a window was open (sampled by gitmd.capture.context) ----------------

HOST_DTYPE = np.dtype(
    [
        ("t_ns", "<i8"),  # unix realtime
        ("job_run_ns", "<i8"),  # cumulative, all threads of the job's processes
        ("job_wait_ns", "<i8"),  # cumulative runnable-but-waiting time, same threads
        ("main_run_ns", "<i8"),  # the busiest thread only
        ("main_wait_ns", "<i8"),
        ("job_threads", "<i4"),
        ("cores_busy_ns", "<i8"),  # cumulative busy time of the job's allowed cores (all tasks)
        ("cores_total_ns", "<i8"),  # cumulative elapsed time of those cores
    ]
)
GPU_DTYPE = np.dtype(
    [
        ("t_ns", "<i8"),
        ("gpu", "<i4"),
        ("sm_clock_mhz", "<f4"),
        ("sm_clock_max_mhz", "<f4"),
        ("power_mw", "<f4"),
        ("power_limit_mw", "<f4"),
        ("temperature_c", "<f4"),
        ("reasons", "<u4"),  # NVML clock event reason bits
        ("util_pct", "<f4"),
        ("others", "<i4"),  # processes on this GPU that are not the job's
        ("others_sm_pct", "<f4"),  # their SM utilization, summed, from the newest per-process samples
    ]
)


@dataclass(frozen=True)
class WindowContext:
    interval_s: float
    cores: tuple[int, ...]  # the job's allowed CPUs
    gpus: tuple[int, ...]  # the GPUs the job was seen on (all, when it was seen on none)
    main_tid: int
    host: np.ndarray  # HOST_DTYPE
    gpu: np.ndarray  # GPU_DTYPE
    notes: tuple[str, ...] = ()

    @staticmethod
    def empty() -> WindowContext:
        return WindowContext(0.0, (), (), 0, np.zeros(0, HOST_DTYPE), np.zeros(0, GPU_DTYPE))


# -- a closed window ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessWindow:
    pid: int
    status: RingStatus
    records: Decoded
    clock_pairs: np.ndarray  # header pairs + CLOCK records: (cupti_ns, mono_ns, real_ns)


@dataclass(frozen=True)
class WindowResult:
    job_id: str
    window_id: int
    start_real_ns: int
    end_real_ns: int
    processes: list[ProcessWindow]
    notes: list[str]
    context: WindowContext = field(default_factory=WindowContext.empty)


# -- GPU telemetry --------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None = None
    name: str = ""


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
