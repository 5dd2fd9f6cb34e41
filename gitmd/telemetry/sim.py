"""Simulated backend for machines without a GPU and for tests. Never how a feature is shown to work.

Deterministic: every value is a pure function of (seed, GPU, seconds since open), so a test that
drives the clock gets the same readings every time. It can play throttling episodes and processes
from the [sim] config section.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable

from gitmd.config import SimConfig
from gitmd.telemetry.backend import GpuInfo, GpuProcess, GpuSample, ProcessUtilization, TelemetryBackend

SM_MAX_MHZ = 1980.0
MEM_MAX_MHZ = 3201.0
POWER_LIMIT_MW = 700_000.0


def _unit(seed: int, *key: object) -> float:
    """A deterministic number in [0, 1) from the seed and a key."""
    return (zlib.crc32(repr((seed, *key)).encode()) & 0xFFFFFF) / float(1 << 24)


class SimBackend(TelemetryBackend):
    name = "sim"

    def __init__(
        self,
        config: SimConfig,
        monotonic_s: Callable[[], float] = time.monotonic,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._cfg = config
        self._monotonic_s = monotonic_s
        self._clock_ns = clock_ns
        self._t0 = 0.0
        self._power_limit_mw: dict[int, int] = {}
        self._sm_lock_mhz: dict[int, int] = {}

    def open(self) -> None:
        self._t0 = self._monotonic_s()

    def close(self) -> None:
        pass

    def driver_version(self) -> str:
        return "sim-1.0"

    def gpus(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=i,
                name=self._cfg.name,
                uuid=f"GPU-sim-{self._cfg.seed:04d}-{i:04d}",
                vendor="sim",
                pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                memory_total_bytes=self._cfg.memory_total_bytes,
                sm_clock_max_mhz=SM_MAX_MHZ,
                mem_clock_max_mhz=MEM_MAX_MHZ,
                power_limit_mw=POWER_LIMIT_MW,
            )
            for i in range(self._cfg.gpus)
        ]

    def _gpu(self, index: int) -> None:
        if not 0 <= index < self._cfg.gpus:
            raise IndexError(index)

    def power_limit_mw(self, index: int) -> int:
        self._gpu(index)
        return self._power_limit_mw.get(index, int(POWER_LIMIT_MW))

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self._gpu(index)
        if not 100_000 <= milliwatts <= POWER_LIMIT_MW:
            raise ValueError(f"power limit {milliwatts} mW is outside 100000..{POWER_LIMIT_MW:.0f}")
        self._power_limit_mw[index] = int(milliwatts)

    def locked_sm_clock_mhz(self, index: int) -> int | None:
        self._gpu(index)
        return self._sm_lock_mhz.get(index)

    def lock_sm_clock_mhz(self, index: int, mhz: int | None) -> None:
        self._gpu(index)
        if mhz is None:
            self._sm_lock_mhz.pop(index, None)
        elif not 210 <= mhz <= SM_MAX_MHZ:
            raise ValueError(f"SM clock {mhz} MHz is outside 210..{SM_MAX_MHZ:.0f}")
        else:
            self._sm_lock_mhz[index] = int(mhz)

    def elapsed_s(self) -> float:
        return self._monotonic_s() - self._t0

    def process_utilization(self, index: int, since_us: int) -> list[ProcessUtilization]:
        t = self.elapsed_s()
        now_us = self._clock_ns() // 1000
        if now_us <= since_us:
            return []
        return [
            ProcessUtilization(p.pid, now_us, min(100.0, p.sm_util_pct))
            for p in self._cfg.processes
            if p.gpu == index and p.start_s <= t and (p.end_s is None or t < p.end_s)
        ]

    def sample(self, index: int) -> GpuSample:
        if not 0 <= index < self._cfg.gpus:
            raise IndexError(index)
        t = self.elapsed_s()
        seed = self._cfg.seed
        procs = tuple(
            GpuProcess(pid=p.pid, used_memory_bytes=p.used_memory_bytes, name=p.name)
            for p in self._cfg.processes
            if p.gpu == index and p.start_s <= t and (p.end_s is None or t < p.end_s)
        )
        episode = next(
            (
                e
                for e in self._cfg.throttle_episodes
                if e.gpu == index and e.start_s <= t < e.start_s + e.duration_s
            ),
            None,
        )
        busy = bool(procs)
        phase = _unit(seed, index, "phase") * 2 * math.pi
        wobble = 0.5 + 0.5 * math.sin(t / 7.0 + phase)
        util = (85.0 + 14.0 * wobble) if busy else 0.0
        sm_clock = SM_MAX_MHZ if busy else 345.0
        if busy and index in self._sm_lock_mhz:
            sm_clock = float(self._sm_lock_mhz[index])
        limit = self._power_limit_mw.get(index, POWER_LIMIT_MW)
        reasons: tuple[str, ...] = () if busy else ("gpu_idle",)
        power = (450_000.0 + 200_000.0 * wobble) if busy else 75_000.0 + 5_000.0 * wobble
        if episode is not None:
            sm_clock = SM_MAX_MHZ * episode.sm_clock_factor
            reasons = (episode.reason,)
            power = limit if episode.reason == "sw_power_cap" else power
        if power > limit:  # a lowered limit caps the draw, and the clock with it
            sm_clock *= limit / power
            power = limit
            reasons = (*reasons, "sw_power_cap") if "sw_power_cap" not in reasons else reasons
        used = sum(p.used_memory_bytes or 0 for p in procs) + 600 * 2**20
        return GpuSample(
            gpu_index=index,
            uuid=f"GPU-sim-{seed:04d}-{index:04d}",
            ts_ns=self._clock_ns(),
            utilization_gpu_pct=round(util, 1),
            utilization_memory_pct=round(util * 0.6, 1),
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=MEM_MAX_MHZ if busy else 1593.0,
            sm_clock_max_mhz=SM_MAX_MHZ,
            mem_clock_max_mhz=MEM_MAX_MHZ,
            power_mw=round(power, 1),
            power_limit_mw=limit,
            temperature_c=round(32.0 + (30.0 if busy else 0.0) + 5.0 * wobble, 1),
            memory_used_bytes=used,
            memory_total_bytes=self._cfg.memory_total_bytes,
            pcie_rx_bytes_per_s=(2.0e9 * wobble) if busy else 0.0,
            pcie_tx_bytes_per_s=(0.5e9 * wobble) if busy else 0.0,
            clock_event_reasons=reasons,
            processes=procs,
        )
