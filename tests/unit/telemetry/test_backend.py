import pytest

from gitmd.errors import BackendUnavailableError
from gitmd.telemetry.backend import (
    GpuInfo,
    GpuSample,
    TelemetryBackend,
    decode_reasons,
    encode_reasons,
    select_backend,
)


def test_reasons_round_trip_and_unknown_bits() -> None:
    assert decode_reasons(0) == ()
    assert decode_reasons(0x4 | 0x8) == ("sw_power_cap", "hw_slowdown")
    assert decode_reasons(0x1000) == ("bit_0x1000",)
    for mask in (0x1, 0x1FF, 0x1004):
        assert encode_reasons(decode_reasons(mask)) == mask


class _Fake(TelemetryBackend):
    def __init__(self, name: str, ok: bool, log: list[str]) -> None:
        self.name = name
        self.ok = ok
        self.log = log

    def open(self) -> None:
        self.log.append(self.name)
        if not self.ok:
            raise BackendUnavailableError(f"{self.name} missing")

    def close(self) -> None: ...

    def driver_version(self) -> str:
        return ""

    def gpus(self) -> list[GpuInfo]:
        return []

    def sample(self, index: int) -> GpuSample:
        raise IndexError(index)


def factories(ok: dict[str, bool], log: list[str]) -> dict:
    return {n: (lambda n=n: _Fake(n, ok[n], log)) for n in ok}


def test_auto_prefers_nvml_then_rocm_then_sim() -> None:
    log: list[str] = []
    b = select_backend("auto", factories({"nvml": False, "rocm": True, "sim": True}, log))
    assert b.name == "rocm" and log == ["nvml", "rocm"]
    log.clear()
    b = select_backend("auto", factories({"nvml": False, "rocm": False, "sim": True}, log))
    assert b.name == "sim"


def test_explicit_choice_fails_loudly() -> None:
    with pytest.raises(BackendUnavailableError, match="nvml missing"):
        select_backend("nvml", factories({"nvml": False, "rocm": True, "sim": True}, []))
