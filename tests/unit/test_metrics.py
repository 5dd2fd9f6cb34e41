"""The Prometheus exporter (gitmd/metrics.py): names and units by the exporter conventions, labels
as dcgm-exporter's, and gitmd's own state from the service's snapshot."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gitmd import __version__
from gitmd.analysis.steps import JobSteps, StepStats
from gitmd.capture.windows import ProcessWindow, WindowResult
from gitmd.config import SimConfig, SimProcess, ThrottleEpisode
from gitmd.jobs.registry import Registration
from gitmd.loop.snapshot import RunningJob, StateSnapshot
from gitmd.metrics import build_registry
from gitmd.records import Decoded, RingStatus
from gitmd.telemetry.sampler import Sampler
from gitmd.telemetry.sim import SimBackend
from tests.unit.loop.helpers import make_service, recurring

# docs/operations.md's table of renames
RENAMES = {
    "gitm_gpu_utilization_pct": "gitm_gpu_utilization_ratio",
    "gitm_gpu_mem_copy_utilization_pct": "gitm_gpu_mem_copy_utilization_ratio",
    "gitm_gpu_sm_clock_mhz": "gitm_gpu_sm_clock_hertz",
    "gitm_gpu_mem_clock_mhz": "gitm_gpu_mem_clock_hertz",
    "gitm_gpu_sm_clock_max_mhz": "gitm_gpu_sm_clock_max_hertz",
    "gitm_gpu_power_usage_w": "gitm_gpu_power_usage_watts",
    "gitm_gpu_power_limit_w": "gitm_gpu_power_limit_watts",
    "gitm_gpu_temp_c": "gitm_gpu_temperature_celsius",
    "gitm_gpu_pcie_rx_bytes_per_s": "gitm_gpu_pcie_rx_bytes_per_second",
    "gitm_gpu_pcie_tx_bytes_per_s": "gitm_gpu_pcie_tx_bytes_per_second",
}


def sim_sampler() -> tuple[SimBackend, Sampler]:
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
    return backend, sampler


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: (name, its labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def value(text: str, metric: str, /, **labels: str) -> float:
    """The one sample of ``metric`` whose labels include ``labels``."""
    got = [v for (n, ls), v in samples(text).items() if n == metric and set(labels.items()) <= set(ls)]
    assert len(got) == 1, (metric, labels, got)
    return got[0]


def test_gpu_families_are_named_in_base_units_and_labelled_as_dcgm_exporter_does() -> None:
    backend, sampler = sim_sampler()
    s0 = next(s for s in sampler.latest() if s.gpu_index == 0)
    text = scrape(build_registry(sampler, backend.gpus(), hostname="node1"))

    # dcgm-exporter's label names, on every GPU family
    gpu_families = [f for f in text_string_to_metric_families(text) if f.name.startswith("gitm_gpu_")]
    assert len(gpu_families) == 16
    for f in gpu_families:
        assert {"gpu", "UUID", "pci_bus_id", "modelName", "Hostname"} <= set(f.samples[0].labels), f.name
    sm = next(f for f in gpu_families if f.name == "gitm_gpu_sm_clock_hertz")
    assert sm.samples[0].labels == {
        "gpu": "0",
        "UUID": "GPU-sim-0000-0000",
        "pci_bus_id": "00000000:18:00.0",
        "modelName": "Simulated H200",
        "Hostname": "node1",
    }
    # units converted: MHz -> Hz, mW -> W, percent -> 0..1
    assert value(text, "gitm_gpu_sm_clock_hertz", gpu="0") == pytest.approx(1188e6)
    assert value(text, "gitm_gpu_sm_clock_max_hertz", gpu="0") == pytest.approx(s0.sm_clock_max_mhz * 1e6)
    assert value(text, "gitm_gpu_mem_clock_hertz", gpu="0") == pytest.approx(s0.mem_clock_mhz * 1e6)
    assert value(text, "gitm_gpu_power_usage_watts", gpu="0") == pytest.approx(s0.power_mw / 1000)
    assert value(text, "gitm_gpu_power_limit_watts", gpu="0") == pytest.approx(s0.power_limit_mw / 1000)
    assert value(text, "gitm_gpu_temperature_celsius", gpu="0") == pytest.approx(s0.temperature_c)
    ratio = value(text, "gitm_gpu_utilization_ratio", gpu="0")
    assert ratio == pytest.approx(s0.utilization_gpu_pct / 100) and 0 < ratio <= 1
    assert 0 <= value(text, "gitm_gpu_mem_copy_utilization_ratio", gpu="1") <= 1
    assert value(text, "gitm_gpu_fb_total_bytes", gpu="1") == pytest.approx(s0.memory_total_bytes)
    assert value(text, "gitm_gpu_clocks_event_reason_active", gpu="0", reason="sw_power_cap") == 1.0
    assert value(text, "gitm_gpu_clocks_event_reasons", gpu="1") == 1.0  # gpu_idle
    assert value(text, "gitm_gpu_processes", gpu="0") == 1.0
    assert value(text, "gitm_daemon_samples_total") == 2.0
    assert (
        'gitm_gpu_sm_clock_hertz{Hostname="node1",UUID="GPU-sim-0000-0000",gpu="0",'
        'modelName="Simulated H200",pci_bus_id="00000000:18:00.0"} 1.188e+09'
    ) in text


def test_every_name_follows_the_naming_conventions(tmp_path: Path) -> None:
    backend, sampler = sim_sampler()
    svc = make_service(tmp_path)
    text = scrape(build_registry(sampler, backend.gpus(), svc.metrics_snapshot))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert len(types) > 25
    # gitmd's own cost on the host (hardening issue, item 12)
    assert types["gitm_process_cpu_seconds_total"] == "counter"
    assert types["gitm_process_resident_memory_bytes"] == "gauge"
    for name, kind in types.items():
        assert name.startswith("gitm_"), name
        assert re.fullmatch(r"[a-z_]+", name), name
        # counters, and only counters, end in _total
        assert name.endswith("_total") == (kind == "counter"), (name, kind)
        # no unit left that is not a base unit
        assert not re.search(r"_(pct|percent|mhz|khz|c|w|mw|ms|us|ns|s|per_s|temp)$", name), name
        assert not re.search(r"_(pct|mhz|mw)_", name), name
    for f in text_string_to_metric_families(text):
        if f.type == "counter":
            assert all(s.name == f.name + "_total" for s in f.samples), f.name
    # the renames docs/operations.md lists: every old name gone, every new one there
    for old, new in RENAMES.items():
        assert old not in types and new in types, (old, new)
    assert "uuid=" not in text  # the label is dcgm-exporter's UUID now


def test_gitmd_state_from_the_service(tmp_path: Path) -> None:
    _, sampler = sim_sampler()
    svc = make_service(tmp_path)
    registry = build_registry(sampler, [], svc.metrics_snapshot)

    text = scrape(registry)
    assert value(text, "gitm_state_up") == 1.0
    assert value(text, "gitm_build_info", version=__version__, python=platform.python_version()) == 1.0
    assert value(text, "gitm_paused") == 0.0
    for state in ("registered", "running", "exited", "lost"):
        assert value(text, "gitm_jobs", state=state) == 0.0
    assert value(text, "gitm_capture_windows_total") == 0.0
    assert value(text, "gitm_experiments_started_total") == 0.0
    assert value(text, "gitm_experiments_ended_total", outcome="promoted") == 0.0
    assert "gitm_job_step_seconds{" not in text

    reg = Registration("train", ("python", "train.py"), "/srv", os.getuid(), os.getgid())
    view, _ = svc.register_job(reg)
    job_id = view.job.id
    svc.set_pause(True, "root", "maintenance")
    wid = recurring(svc, "train")
    svc.library.add_policy(wid, {"A": "1"}, "validated", 1.2, (1.1, 1.3), {})
    now = time.time_ns()
    with svc.jobs.store.transaction() as db:
        for state in ("treatment", "promoted", "promoted", "reverted", "abandoned"):
            db.conn.execute(
                "INSERT INTO experiments (job_id, lever, setting, state, created_ns, updated_ns) "
                "VALUES (?, 'sync_spin', '{}', ?, ?, ?)",
                (job_id, state, now, now),
            )
        for i, state in enumerate(("running", "reverted", "promoted")):
            db.conn.execute(
                "INSERT INTO launch_trials (workload_id, lever, setting, state, created_ns, updated_ns) "
                "VALUES (?, 'tf32_override', '{}', ?, ?, ?)",
                (f"w{i}", state, now, now),
            )
        for state in ("applied", "promoted", "reverted", "failed"):
            db.conn.execute(
                "INSERT INTO interventions (job_id, lever, kind, setting, target, saved, state, "
                "created_ns, updated_ns) VALUES (?, 'sync_spin', 'live', '{}', '{}', '{}', ?, ?, ?)",
                (job_id, state, now, now),
            )
    # the job's step, as its latest window found it, and that window (12,000 launches in 2 s)
    st = svc.states.get(job_id)
    assert st is not None
    st.steps = JobSteps(1, 1, StepStats(True, "", median_ns=0.25e9), "sgemm")
    jc = svc.capture.get(job_id) if svc.capture is not None else None
    assert jc is not None
    jc.last = window(job_id, kernels=12_000, seconds=2.0)

    text = scrape(registry)
    assert value(text, "gitm_paused") == 1.0
    assert value(text, "gitm_jobs", state="registered") == 1.0
    assert value(text, "gitm_jobs", state="running") == 0.0
    assert value(text, "gitm_experiments_started_total") == 5.0
    assert value(text, "gitm_experiments_ended_total", outcome="promoted") == 2.0
    assert value(text, "gitm_experiments_ended_total", outcome="reverted") == 1.0
    assert value(text, "gitm_experiments_ended_total", outcome="abandoned") == 1.0
    assert value(text, "gitm_experiments_ended_total", outcome="failed") == 0.0
    assert value(text, "gitm_launch_trials_started_total") == 3.0
    assert value(text, "gitm_launch_trials_ended_total", outcome="promoted") == 1.0
    assert value(text, "gitm_launch_trials_ended_total", outcome="reverted") == 1.0
    assert value(text, "gitm_policies", status="validated") == 1.0
    assert value(text, "gitm_policies", status="pinned") == 0.0
    assert value(text, "gitm_interventions_in_force", state="applied") == 1.0
    assert value(text, "gitm_interventions_in_force", state="promoted") == 1.0
    assert value(text, "gitm_interventions_in_force", state="applying") == 0.0
    assert 'gitm_interventions_in_force{state="reverted"}' not in text
    assert f'gitm_job_step_seconds{{job_id="{job_id}",name="train"}} 0.25' in text
    # 6,000 launches/s at capture.launch_cost_us (6 us) each
    assert value(text, "gitm_job_capture_cost_ratio", job_id=job_id, name="train") == pytest.approx(0.036)

    # its observation over: what capture costs it from then on is not known, so not exported
    st.observed = True
    assert "gitm_job_capture_cost_ratio{" not in scrape(registry)
    # an ended job has no per-job series (only tracked jobs have them: bounded)
    svc.report_exit(job_id, 0)
    text = scrape(registry)
    assert value(text, "gitm_jobs", state="exited") == 1.0
    assert "gitm_job_step_seconds{" not in text


def window(job_id: str, kernels: int, seconds: float) -> WindowResult:
    empty = np.zeros(0)
    records = Decoded(np.zeros(kernels), empty, empty, empty, empty, empty, empty, empty, hostsrcs=empty)
    status = RingStatus(1, 1, "on", "", 1, kernels, 0, 0, 0, 0, 1, 0, 1 << 16, 0)
    start = time.time_ns()
    return WindowResult(
        job_id, 1, start, start + int(seconds * 1e9), [ProcessWindow(1, status, records, empty)], []
    )


def test_a_snapshot_by_hand_unknown_states_and_jobs_without_figures() -> None:
    _, sampler = sim_sampler()
    snap = StateSnapshot(
        jobs={"running": 2, "zombie": 1},
        capture_windows=None,  # capture is off
        running_jobs=(RunningJob("j1", "a", step_s=0.5), RunningJob("j2", "b")),
    )
    text = scrape(build_registry(sampler, [], lambda: snap))
    assert value(text, "gitm_jobs", state="running") == 2.0
    assert value(text, "gitm_jobs", state="zombie") == 1.0  # a state the exporter does not know
    assert "gitm_capture_windows_total" not in text
    assert 'gitm_job_step_seconds{job_id="j1",name="a"} 0.5' in text
    assert 'job_id="j2"' not in text


def test_a_failing_snapshot_loses_only_gitmds_own_families() -> None:
    backend, sampler = sim_sampler()

    def broken() -> StateSnapshot:
        raise RuntimeError("database is locked")

    text = scrape(build_registry(sampler, backend.gpus(), broken))
    assert value(text, "gitm_state_up") == 0.0
    assert value(text, "gitm_build_info", version=__version__) == 1.0
    assert value(text, "gitm_gpu_sm_clock_hertz", gpu="0") == pytest.approx(1188e6)
    assert "gitm_jobs" not in text


def test_without_a_snapshot_only_the_gpu_families() -> None:
    backend, sampler = sim_sampler()
    text = scrape(build_registry(sampler, backend.gpus()))
    assert "gitm_gpu_sm_clock_hertz{" in text
    assert "gitm_build_info" not in text and "gitm_jobs" not in text
