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


def test_an_experiment_that_continues_an_earlier_runs_trial_is_served() -> None:
    """A trial that spans runs carries the earlier run's pairs as arms with no window and no time
    of this run; serving it raised KeyError (H200 2026-12-04: `gitmctl` asked for timm's
    experiments and got an internal error). They are served, each naming the experiment it came
    from."""
    from gitmd.api.convert import experiment_to_pb
    from gitmd.experiments.live import Experiment

    e = Experiment(
        5, "j", "cpu_affinity", {"cpus": [1, 2]}, "launch_bound", "running",
        [{"arm": "A", "step_ms": 2.0, "gpu_busy": 0.5, "from": 3}, {"arm": "B", "step_ms": 1.5, "from": 3},
         {"arm": "A", "window_id": 9, "step_ms": 2.1, "at_ns": 7}],
    )  # fmt: skip
    pb = experiment_to_pb(e)
    assert [(a.arm, a.window_id, a.at_unix_ns, a.carried_from) for a in pb.arms] == [
        ("A", 0, 0, 3), ("B", 0, 0, 3), ("A", 9, 7, 0)
    ]  # fmt: skip


def test_a_distributed_jobs_processes_carry_their_rank_and_gpus() -> None:
    """torchrun's workers are one job: each process shows its rank and the GPUs NVML lists it on; a
    process launched alone has no rank (unset, not 0)."""
    import dataclasses

    from gitmd.capture.ranks import Rank
    from gitmd.capture.ring import RingStatus
    from gitmd.jobs.registry import Job
    from gitmd.service import JobView

    job = Job("j1", "n", ("torchrun",), "/", 0, 0, "running", 1, None, None, "/run/j1", True)
    st = RingStatus(7, 9, "idle", "", 0, 0, 0, 0, 0, 0, 0, 130000, 64, 0, 0)
    r0, r1, alone = st, dataclasses.replace(st, pid=8), dataclasses.replace(st, pid=6)
    view = JobView(
        job, [(r1, True), (r0, True), (alone, True)], 2,
        ranks={7: Rank(0, 0, 2), 8: Rank(1, None, 2)}, gpus={7: (0,), 8: (0, 1)},
    )  # fmt: skip
    by_pid = {p.pid: p for p in convert.job_to_pb(view).processes}
    assert (by_pid[7].rank, by_pid[7].local_rank, by_pid[7].world_size, list(by_pid[7].gpus)) == (
        0,
        0,
        2,
        [0],
    )
    assert by_pid[8].rank == 1 and not by_pid[8].HasField("local_rank") and list(by_pid[8].gpus) == [0, 1]
    assert not by_pid[6].HasField("rank") and list(by_pid[6].gpus) == []
