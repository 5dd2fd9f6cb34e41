from pathlib import Path

from gitmd.store.db import Store
from gitmd.store.telemetry import MINUTE_NS, TelemetryStore
from gitmd.telemetry.backend import FieldError, GpuProcess, GpuSample

T0 = 1_796_000_000 * 10**9 - (1_796_000_000 * 10**9) % MINUTE_NS  # a minute boundary


def sample(gpu: int, ts: int, util: float, reasons: tuple[str, ...] = ()) -> GpuSample:
    return GpuSample(
        gpu_index=gpu,
        uuid=f"GPU-{gpu}",
        ts_ns=ts,
        utilization_gpu_pct=util,
        sm_clock_mhz=1980.0,
        memory_used_bytes=1000,
        clock_event_reasons=reasons,
        processes=(GpuProcess(11, 5, "py"),),
        errors=(FieldError("power_mw", "Not Supported"),),
    )


def make(tmp_path: Path) -> TelemetryStore:
    return TelemetryStore(Store(tmp_path / "g.db"))


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    ts = make(tmp_path)
    s = sample(0, T0, 50.0, ("sw_power_cap",))
    ts.insert([s])
    got, truncated = ts.query(None, T0, T0 + 1, 10)
    assert got == [s] and not truncated


def test_query_filters_orders_and_truncates_keeping_newest(tmp_path: Path) -> None:
    ts = make(tmp_path)
    ts.insert([sample(g, T0 + i * 10**9, float(i)) for i in range(10) for g in (0, 1)])
    got, truncated = ts.query(1, T0, T0 + 100 * 10**9, 4)
    assert truncated
    assert [s.gpu_index for s in got] == [1] * 4
    assert [s.utilization_gpu_pct for s in got] == [6.0, 7.0, 8.0, 9.0]


def test_retention_downsamples_whole_minutes_and_drops_old(tmp_path: Path) -> None:
    ts = make(tmp_path)
    # 3 minutes of 1 Hz samples on GPU 0; a throttle reason in minute 0 only.
    rows = [sample(0, T0 + i * 10**9, float(i % 60), ("sw_power_cap",) if i == 5 else ()) for i in range(180)]
    ts.insert(rows)
    now = T0 + 180 * 10**9
    # full-rate period 90 s -> cutoff at T0+90s, aligned down to T0+60s: minute 0 folds, the rest stays.
    r = ts.apply_retention(now, full_rate_s=90, downsampled_s=3600)
    assert r.downsampled_rows == 60 and r.aggregates_written == 1 and r.aggregates_dropped == 0
    full, agg = ts.count()
    assert (full, agg) == (120, 1)
    got, _ = ts.query(0, T0, now, 1000)
    first = got[0]
    assert first.downsampled and first.aggregated_samples == 60 and first.ts_ns == T0
    assert first.utilization_gpu_pct == sum(range(60)) / 60
    assert first.clock_event_reasons == ("sw_power_cap",)
    assert first.memory_used_bytes == 1000
    assert not any(s.downsampled for s in got[1:]) and len(got) == 121
    # idempotent: a second pass changes nothing
    r = ts.apply_retention(now, full_rate_s=90, downsampled_s=3600)
    assert (r.downsampled_rows, r.aggregates_written) == (0, 0)
    # much later: everything folds, then the aggregates age out
    r = ts.apply_retention(now + 7200 * 10**9, full_rate_s=60, downsampled_s=3600)
    assert ts.count() == (0, 0)
    assert r.aggregates_dropped == 3


def test_insert_same_timestamp_twice_replaces(tmp_path: Path) -> None:
    ts = make(tmp_path)
    ts.insert([sample(0, T0, 1.0)])
    ts.insert([sample(0, T0, 2.0)])
    got, _ = ts.query(0, T0, T0 + 1, 10)
    assert [s.utilization_gpu_pct for s in got] == [2.0]
