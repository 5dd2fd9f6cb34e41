from gitmd.config import SimConfig, SimProcess, ThrottleEpisode
from gitmd.telemetry.backend import TelemetryBackend
from gitmd.telemetry.sim import SimBackend


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(cfg: SimConfig) -> tuple[SimBackend, Clock]:
    clock = Clock()
    b = SimBackend(cfg, monotonic_s=clock, clock_ns=lambda: 42)
    b.open()
    return b, clock


def test_is_a_real_backend_subclass() -> None:
    assert issubclass(SimBackend, TelemetryBackend)


def test_deterministic() -> None:
    cfg = SimConfig(gpus=2, seed=7, processes=(SimProcess(gpu=0, pid=10),))
    a, ca = make(cfg)
    b, cb = make(cfg)
    for t in (0.0, 1.5, 33.0):
        ca.t = cb.t = 100.0 + t
        assert a.sample(0) == b.sample(0)
        assert a.sample(1) == b.sample(1)


def test_throttle_episode_plays_then_ends() -> None:
    cfg = SimConfig(
        gpus=1,
        processes=(SimProcess(gpu=0, pid=10),),
        throttle_episodes=(ThrottleEpisode(gpu=0, start_s=10, duration_s=5, reason="hw_thermal_slowdown"),),
    )
    b, clock = make(cfg)
    clock.t = 105.0
    before = b.sample(0)
    clock.t = 112.0
    during = b.sample(0)
    clock.t = 116.0
    after = b.sample(0)
    assert not before.throttled and not after.throttled
    assert during.clock_event_reasons == ("hw_thermal_slowdown",) and during.throttled
    assert during.sm_clock_mhz is not None and before.sm_clock_mhz is not None
    assert during.sm_clock_mhz < before.sm_clock_mhz


def test_processes_come_and_go() -> None:
    cfg = SimConfig(gpus=2, processes=(SimProcess(gpu=1, pid=99, name="job", start_s=5, end_s=8),))
    b, clock = make(cfg)
    clock.t = 106.0
    assert [p.pid for p in b.sample(1).processes] == [99]
    assert b.sample(0).processes == ()
    clock.t = 109.0
    assert b.sample(1).processes == ()
    assert b.sample(1).clock_event_reasons == ("gpu_idle",)
