"""Periodic sampling of every GPU, driven by APScheduler, fanned out to the store and watchers.

One tick reads every GPU once; a GPU whose read fails entirely is logged and skipped, the others
still land. Watchers get samples through bounded queues: a slow watcher loses its oldest samples,
it never slows sampling.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from apscheduler.schedulers.base import BaseScheduler

from gitmd.events import Hub, Watch
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import GpuSample, TelemetryBackend

log = logging.getLogger(__name__)

SAMPLE_JOB_ID = "telemetry.sample"
RETENTION_JOB_ID = "telemetry.retention"


@dataclass
class SamplerStats:
    ticks: int = 0
    samples: int = 0
    field_errors: int = 0
    gpu_failures: int = 0
    store_failures: int = 0
    last_tick_s: float = 0.0


class Sampler:
    def __init__(self, backend: TelemetryBackend, store: TelemetryStore | None, interval_s: float) -> None:
        self.backend = backend
        self.store = store
        self.interval_s = interval_s
        self.stats = SamplerStats()
        self._gpu_count = len(backend.gpus())
        self._latest: dict[int, GpuSample] = {}
        self.hub: Hub[GpuSample] = Hub()
        self._lock = threading.Lock()

    def schedule(self, scheduler: BaseScheduler) -> None:
        scheduler.add_job(
            self.tick,
            "interval",
            seconds=self.interval_s,
            id=SAMPLE_JOB_ID,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(self.interval_s)),
        )

    def tick(self) -> list[GpuSample]:
        t0 = time.perf_counter()
        samples: list[GpuSample] = []
        for i in range(self._gpu_count):
            try:
                s = self.backend.sample(i)
            except Exception:
                self.stats.gpu_failures += 1
                log.exception("telemetry: reading GPU %d failed", i)
                continue
            samples.append(s)
            self.stats.field_errors += len(s.errors)
        if self.store is not None:
            try:
                self.store.insert(samples)
            except Exception:
                self.stats.store_failures += 1
                log.exception("telemetry: storing %d samples failed", len(samples))
        with self._lock:
            for s in samples:
                self._latest[s.gpu_index] = s
        for s in samples:
            self.hub.publish(s)
        self.stats.ticks += 1
        self.stats.samples += len(samples)
        self.stats.last_tick_s = time.perf_counter() - t0
        return samples

    def latest(self, gpu_index: int | None = None) -> list[GpuSample]:
        with self._lock:
            if gpu_index is None:
                return [self._latest[i] for i in sorted(self._latest)]
            s = self._latest.get(gpu_index)
            return [s] if s is not None else []

    def process_gpus(self) -> dict[int, tuple[int, ...]]:
        """pid -> the GPUs (nvidia-smi index) whose latest sample lists the process."""
        out: dict[int, set[int]] = {}
        for s in self.latest():
            for p in s.processes:
                out.setdefault(p.pid, set()).add(s.gpu_index)
        return {pid: tuple(sorted(g)) for pid, g in out.items()}

    def watch(self, gpu_index: int | None, alive: threading.Event) -> Watch[GpuSample]:
        return self.hub.watch(alive, None if gpu_index is None else (lambda s: s.gpu_index == gpu_index))

    def close_all(self) -> None:
        self.hub.close_all()
