from gitmd.api import convert
from gitmd.telemetry.backend import FieldError, GpuInfo, GpuProcess, GpuSample


def test_absent_values_stay_absent() -> None:
    msg = convert.sample_to_pb(GpuSample(gpu_index=0, uuid="u", ts_ns=5, power_mw=None, sm_clock_mhz=0.0))
    assert not msg.HasField("power_mw")
    assert msg.HasField("sm_clock_mhz") and msg.sm_clock_mhz == 0.0


def test_sample_fields_carry_over() -> None:
    s = GpuSample(
        gpu_index=1,
        uuid="u",
        ts_ns=9,
        memory_used_bytes=7,
        clock_event_reasons=("hw_slowdown",),
        processes=(GpuProcess(4, None, "x"), GpuProcess(5, 10, "y")),
        errors=(FieldError("temperature_c", "nope"),),
    )
    msg = convert.sample_to_pb(s)
    assert msg.memory_used_bytes == 7 and list(msg.clock_event_reasons) == ["hw_slowdown"]
    assert not msg.processes[0].HasField("used_memory_bytes") and msg.processes[1].used_memory_bytes == 10
    assert msg.errors[0].field == "temperature_c"


def test_gpu() -> None:
    msg = convert.gpu_to_pb(GpuInfo(index=0, name="n", uuid="u", vendor="nvidia", sm_clock_max_mhz=1980.0))
    assert msg.sm_clock_max_mhz == 1980.0 and not msg.HasField("power_limit_mw")
