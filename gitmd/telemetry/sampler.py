"""Periodic sampling of every GPU, driven by APScheduler, fanned out to the store and watchers.

One tick reads every GPU once; a GPU whose read fails entirely is logged and skipped, the others
still land. Watchers get samples through bounded queues: a slow watcher loses its oldest samples,
it never slows sampling.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from apscheduler.schedulers.base import BaseScheduler

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


class Subscription:
    """A watcher's bounded queue; ``close`` ends its iteration."""

    def __init__(self, gpu_index: int | None, maxsize: int = 256) -> None:
        self.gpu_index = gpu_index
        self._q: queue.Queue[GpuSample | None] = queue.Queue(maxsize=maxsize)
        self.dropped = 0

    def offer(self, sample: GpuSample) -> None:
        if self.gpu_index is not None and sample.gpu_index != self.gpu_index:
            return
        while True:
            try:
                self._q.put_nowait(sample)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            self._q.get_nowait()
            self._q.put_nowait(None)

    def get(self, timeout_s: float) -> GpuSample | None:
        """The next sample, or None on timeout; raises StopIteration once closed."""
        try:
            item = self._q.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if item is None:
            raise StopIteration
        return item


class Sampler:
    def __init__(self, backend: TelemetryBackend, store: TelemetryStore | None, interval_s: float) -> None:
        self.backend = backend
        self.store = store
        self.interval_s = interval_s
        self.stats = SamplerStats()
        self._gpu_count = len(backend.gpus())
        self._latest: dict[int, GpuSample] = {}
        self._subs: list[Subscription] = []
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
            subs = list(self._subs)
        for sub in subs:
            for s in samples:
                sub.offer(s)
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

    def subscribe(self, gpu_index: int | None) -> Subscription:
        sub = Subscription(gpu_index)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def close_all(self) -> None:
        with self._lock:
            subs, self._subs = self._subs, []
        for sub in subs:
            sub.close()

    def watch(self, gpu_index: int | None, alive: threading.Event) -> Watch:
        return Watch(self, self.subscribe(gpu_index), alive)


class Watch:
    """An iterable of new samples that another thread can cancel (e.g. when the RPC ends)."""

    def __init__(
        self, sampler: Sampler, sub: Subscription, alive: threading.Event, poll_s: float = 0.5
    ) -> None:
        self._sampler = sampler
        self._sub = sub
        self._alive = alive
        self._poll_s = poll_s

    def cancel(self) -> None:
        self._sub.close()

    def __iter__(self) -> Iterator[GpuSample]:
        try:
            while self._alive.is_set():
                try:
                    s = self._sub.get(self._poll_s)
                except StopIteration:
                    return
                if s is not None:
                    yield s
        finally:
            self._sampler.unsubscribe(self._sub)
