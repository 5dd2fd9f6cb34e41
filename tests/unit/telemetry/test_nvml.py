from typing import Any

import pytest

from gitmd.errors import BackendUnavailableError
from gitmd.telemetry.nvml import NvmlBackend
from tests.unit.telemetry.fake_nvml import FakeNvml


def open_backend(fake: FakeNvml) -> NvmlBackend:
    b = NvmlBackend(nvml=fake, clock_ns=lambda: 1_000)  # type: ignore[arg-type]
    b.open()
    return b


def test_static_facts() -> None:
    b = open_backend(FakeNvml(devices=2))
    gpus = b.gpus()
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[1]
    assert g.name == "NVIDIA H200"
    assert g.uuid == "GPU-fake-1"
    assert g.pci_bus_id == "00000000:19:00.0"
    assert g.memory_total_bytes == 141 << 30
    assert g.sm_clock_max_mhz == 1980
    assert g.power_limit_mw == 700_000
    assert b.driver_version() == "580.159.04"


def test_sample_reads_every_field() -> None:
    s = open_backend(FakeNvml()).sample(0)
    assert s.errors == ()
    assert s.ts_ns == 1_000
    assert s.utilization_gpu_pct == 97 and s.utilization_memory_pct == 41
    assert s.sm_clock_mhz == 1755 and s.mem_clock_mhz == 3201
    assert s.power_mw == 612_345 and s.power_limit_mw == 700_000
    assert s.temperature_c == 58
    assert s.memory_used_bytes == 5 << 30
    assert s.pcie_rx_bytes_per_s == 2000 * 1024 and s.pcie_tx_bytes_per_s == 500 * 1024
    assert s.clock_event_reasons == ("sw_power_cap",)
    assert s.throttled
    assert s.processes[0].pid == 1234 and s.processes[0].used_memory_bytes == 2 << 30


@pytest.mark.parametrize("which", ["event", "throttle"])
def test_reason_function_is_probed_under_both_names(which: str) -> None:
    fake = FakeNvml(reasons_fn=which)
    fake.reasons = 0x1 | 0x40
    s = open_backend(fake).sample(0)
    assert s.clock_event_reasons == ("gpu_idle", "hw_thermal_slowdown")


def test_no_reason_function_costs_only_that_field() -> None:
    s = open_backend(FakeNvml(reasons_fn=None)).sample(0)
    assert [e.field for e in s.errors] == ["clock_event_reasons"]
    assert s.sm_clock_mhz == 1755


@pytest.mark.parametrize(
    "failing", ["utilization", "clock", "power", "temperature", "memory", "pcie", "processes"]
)
def test_one_failing_field_never_drops_the_rest(failing: str) -> None:
    fake = FakeNvml()
    fake.fail[failing] = 3
    s = open_backend(fake).sample(0)
    assert s.errors, "the failure must be reported"
    assert all("Not Supported" in e.message for e in s.errors)
    assert s.uuid == "GPU-fake-0"
    present = {
        k: getattr(s, k)
        for k in (
            "utilization_gpu_pct",
            "sm_clock_mhz",
            "power_mw",
            "temperature_c",
            "memory_used_bytes",
            "pcie_rx_bytes_per_s",
        )
    }
    assert sum(v is not None for v in present.values()) >= 4


def test_unavailable_driver_is_translated() -> None:
    with pytest.raises(BackendUnavailableError, match="Driver Not Loaded"):
        open_backend(FakeNvml(init_error=9))


def test_memory_not_available_is_none() -> None:
    from types import SimpleNamespace

    fake = FakeNvml()
    fake.procs = [
        SimpleNamespace(pid=7, usedGpuMemory=None),
        SimpleNamespace(pid=8, usedGpuMemory=(1 << 64) - 1),
    ]
    procs: Any = open_backend(fake).sample(0).processes
    assert [p.used_memory_bytes for p in procs] == [None, None]


def test_close_shuts_nvml_down_once() -> None:
    fake = FakeNvml()
    b = open_backend(fake)
    b.close()
    b.close()
    assert fake.shutdowns == 1


def test_every_nvml_name_used_exists_in_the_real_binding() -> None:
    """The fake can only mirror names we believe in; this checks them against nvidia-ml-py itself."""
    import re
    from pathlib import Path

    import pynvml

    import gitmd.telemetry.nvml as mod

    source = Path(mod.__file__).read_text()
    used = set(re.findall(r"\bnv\.(nvml\w+|NVML_\w+)", source))
    assert used, "the pattern must find the calls"
    missing = sorted(n for n in used if not hasattr(pynvml, n))
    assert not missing, f"not in pynvml: {missing}"
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        assert name in source
