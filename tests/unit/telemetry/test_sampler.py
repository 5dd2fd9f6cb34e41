import threading
from pathlib import Path

from gitmd.config import SimConfig, SimProcess
from gitmd.events import Subscription
from gitmd.store.db import Store
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.backend import GpuSample
from gitmd.telemetry.sampler import Sampler
from gitmd.telemetry.sim import SimBackend


class Broken(SimBackend):
    def sample(self, index: int) -> GpuSample:
        if index == 0:
            raise RuntimeError("gpu 0 fell off the bus")
        return super().sample(index)


def test_tick_stores_and_updates_latest(tmp_path: Path) -> None:
    backend = SimBackend(SimConfig(gpus=2, processes=(SimProcess(gpu=1, pid=5),)))
    backend.open()
    store = TelemetryStore(Store(tmp_path / "g.db"))
    sampler = Sampler(backend, store, 1.0)
    sampler.tick()
    sampler.tick()
    assert store.count() == (4, 0)
    assert [s.gpu_index for s in sampler.latest()] == [0, 1]
    assert sampler.latest(1)[0].processes[0].pid == 5
    assert sampler.stats.samples == 4


def test_a_failing_gpu_does_not_stop_the_others(tmp_path: Path) -> None:
    backend = Broken(SimConfig(gpus=3))
    backend.open()
    sampler = Sampler(backend, TelemetryStore(Store(tmp_path / "g.db")), 1.0)
    got = sampler.tick()
    assert [s.gpu_index for s in got] == [1, 2]
    assert sampler.stats.gpu_failures == 1


def test_watchers_get_samples_and_stop_on_cancel() -> None:
    backend = SimBackend(SimConfig(gpus=2))
    backend.open()
    sampler = Sampler(backend, None, 1.0)
    alive = threading.Event()
    alive.set()
    watch = sampler.watch(1, alive)
    got: list[GpuSample] = []

    def consume() -> None:
        got.extend(watch)

    t = threading.Thread(target=consume)
    t.start()
    sampler.tick()
    sampler.tick()
    watch.cancel()
    t.join(5)
    assert not t.is_alive()
    assert [s.gpu_index for s in got] == [1, 1]
    assert sampler.hub.subscribers() == 0


def test_slow_watcher_loses_oldest_not_newest() -> None:
    sub: Subscription[GpuSample] = Subscription(maxsize=2)
    backend = SimBackend(SimConfig(gpus=1))
    backend.open()
    samples = [backend.sample(0) for _ in range(5)]
    for s in samples:
        sub.offer(s)
    assert sub.dropped == 3
    assert sub.get(0.1) is samples[3] and sub.get(0.1) is samples[4]


def test_which_gpus_each_process_is_on() -> None:
    """pid -> the GPUs whose latest sample lists it (what a job's view shows per process)."""
    procs = (SimProcess(gpu=0, pid=7), SimProcess(gpu=1, pid=7), SimProcess(gpu=1, pid=9))
    backend = SimBackend(SimConfig(gpus=2, processes=procs))
    backend.open()
    sampler = Sampler(backend, None, 1.0)
    assert sampler.process_gpus() == {}  # nothing sampled yet
    sampler.tick()
    assert sampler.process_gpus() == {7: (0, 1), 9: (1,)}
