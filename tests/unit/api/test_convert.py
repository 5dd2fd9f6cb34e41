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


def test_a_jobs_processes_carry_their_windows_and_detaches() -> None:
    from gitmd.capture.ring import RingStatus
    from gitmd.jobs.registry import Job
    from gitmd.service import JobView

    job = Job("j1", "n", ("prog",), "/", 0, 0, "running", 1, None, None, "/run/j1", True)
    st = RingStatus(
        pid=7, start_time_ticks=9, status="idle", reason="window closed by the daemon", window_id=0,
        records_written=100, ring_drops=1, cupti_drops=2, missing_timestamps=0, buffers_completed=3,
        windows_opened=12, cupti_version=130000, capacity=64, pending=0, detaches=9,
    )  # fmt: skip
    msg = convert.job_to_pb(JobView(job, [(st, True)], 12))
    (p,) = msg.processes
    assert (p.pid, p.windows_opened, p.detaches, p.ring_drops, p.alive) == (7, 12, 9, 1, True)
    assert msg.windows == 12
