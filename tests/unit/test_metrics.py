from prometheus_client import generate_latest

from gitmd.config import SimConfig, SimProcess, ThrottleEpisode
from gitmd.metrics import build_registry
from gitmd.telemetry.sampler import Sampler
from gitmd.telemetry.sim import SimBackend


def test_exposition_has_dcgm_style_names_and_labels() -> None:
    clock = [0.0]
    cfg = SimConfig(
        gpus=2,
        processes=(SimProcess(gpu=0, pid=3),),
        throttle_episodes=(ThrottleEpisode(gpu=0, start_s=0, duration_s=10),),
    )
    backend = SimBackend(cfg, monotonic_s=lambda: clock[0])
    backend.open()
    sampler = Sampler(backend, None, 1.0)
    sampler.tick()
    text = generate_latest(build_registry(sampler, backend.gpus())).decode()
    assert 'gitm_gpu_sm_clock_mhz{gpu="0",modelName="Simulated H200",uuid="GPU-sim-0000-0000"} 1188.0' in text
    assert 'gitm_gpu_power_usage_w{gpu="0"' in text
    assert (
        'gitm_gpu_clocks_event_reason_active{gpu="0",modelName="Simulated H200",reason="sw_power_cap",'
        in text
    )
    assert (
        'gitm_gpu_clocks_event_reasons{gpu="1",modelName="Simulated H200",uuid="GPU-sim-0000-0001"} 1.0'
        in text
    )
    assert 'gitm_gpu_processes{gpu="0",modelName="Simulated H200",uuid="GPU-sim-0000-0000"} 1.0' in text
    assert "gitm_daemon_samples_total 2.0" in text
