from types import SimpleNamespace
from typing import Any

import pytest

from gitmd.errors import BackendUnavailableError
from gitmd.telemetry.rocm import RocmBackend


def fake_rocml(**overrides: Any) -> Any:
    """A fake of pyrsmi.rocml: its functions answer -1 on failure, as pyrsmi does."""
    funcs = dict(
        smi_initialize=lambda: None,
        smi_shutdown=lambda: None,
        smi_get_kernel_version=lambda: "6.8.0",
        smi_get_device_count=lambda: 1,
        smi_get_device_name=lambda i: "AMD Instinct MI300X",
        smi_get_device_uuid=lambda i: "GPU-amd-0",
        smi_get_device_unique_id=lambda i: 77,
        smi_get_device_pci_id=lambda i: 4352,
        smi_get_device_memory_total=lambda i: 192 << 30,
        smi_get_device_memory_used=lambda i: 10 << 30,
        smi_get_device_utilization=lambda i: 88,
        smi_get_device_memory_busy=lambda i: 30,
        smi_get_device_average_power=lambda i: 512.5,
        smi_get_device_pcie_throughput=lambda i: 1_000_000,
        smi_get_device_compute_process=lambda: [321],
    )
    funcs.update(overrides)
    return SimpleNamespace(**funcs)


def test_reads_what_rocm_smi_offers() -> None:
    b = RocmBackend(rocml=fake_rocml(), clock_ns=lambda: 5)
    b.open()
    g = b.gpus()[0]
    assert (g.name, g.uuid, g.vendor, g.memory_total_bytes) == (
        "AMD Instinct MI300X",
        "GPU-amd-0",
        "amd",
        192 << 30,
    )
    s = b.sample(0)
    assert s.errors == ()
    assert s.utilization_gpu_pct == 88 and s.utilization_memory_pct == 30
    assert s.power_mw == 512_500
    assert s.memory_used_bytes == 10 << 30
    assert s.pcie_rx_bytes_per_s == 1_000_000
    assert s.sm_clock_mhz is None and s.clock_event_reasons == ()
    assert [p.pid for p in s.processes] == [321]


def test_minus_one_becomes_a_field_error() -> None:
    b = RocmBackend(rocml=fake_rocml(smi_get_device_average_power=lambda i: -1))
    b.open()
    s = b.sample(0)
    assert [e.field for e in s.errors] == ["power_mw"]
    assert s.power_mw is None and s.utilization_gpu_pct == 88


def test_initialise_failure_is_unavailable() -> None:
    def boom() -> None:
        raise RuntimeError("AMD GPU driver not initialized")

    with pytest.raises(BackendUnavailableError, match="driver not initialized"):
        RocmBackend(rocml=fake_rocml(smi_initialize=boom)).open()


def test_real_pyrsmi_without_rocm_is_unavailable() -> None:
    # The real module on a host without ROCm: must be a clean BackendUnavailableError.
    with pytest.raises(BackendUnavailableError):
        RocmBackend().open()
