"""Telemetry persistence: full-rate rows for a recent period, per-minute aggregates beyond it.

Retention runs as one transaction: whole minutes older than the full-rate period are folded into
``telemetry_1m`` (means; clock event reasons OR-ed) and deleted; aggregates older than the
downsampled period are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gitmd.store.db import Store
from gitmd.telemetry.backend import (
    BYTE_METRICS,
    CLOCK_EVENT_REASONS,
    FLOAT_METRICS,
    FieldError,
    GpuProcess,
    GpuSample,
    decode_reasons,
    encode_reasons,
)

MINUTE_NS = 60 * 10**9
_MEAN_COLUMNS = FLOAT_METRICS
_INT_MEAN_COLUMNS = BYTE_METRICS
_COMMON = ("gpu_index", "ts_ns", "uuid", *_MEAN_COLUMNS, *_INT_MEAN_COLUMNS, "clock_event_reasons")


def sample_to_row(s: GpuSample) -> dict[str, Any]:
    row: dict[str, Any] = {
        c: getattr(s, c) for c in ("gpu_index", "ts_ns", "uuid", *_MEAN_COLUMNS, *_INT_MEAN_COLUMNS)
    }
    row["clock_event_reasons"] = encode_reasons(s.clock_event_reasons)
    row["processes"] = json.dumps([[p.pid, p.used_memory_bytes, p.name] for p in s.processes])
    row["errors"] = json.dumps([[e.field, e.message] for e in s.errors])
    return row


def row_to_sample(row: dict[str, Any], downsampled: bool) -> GpuSample:
    values = {c: row[c] for c in ("gpu_index", "ts_ns", "uuid", *_MEAN_COLUMNS)}
    for c in _INT_MEAN_COLUMNS:
        values[c] = None if row[c] is None else int(row[c])
    procs: tuple[GpuProcess, ...] = ()
    errors: tuple[FieldError, ...] = ()
    if not downsampled:
        procs = tuple(GpuProcess(pid, mem, name) for pid, mem, name in json.loads(row["processes"]))
        errors = tuple(FieldError(f, m) for f, m in json.loads(row["errors"]))
    return GpuSample(
        **values,
        clock_event_reasons=decode_reasons(int(row["clock_event_reasons"])),
        processes=procs,
        errors=errors,
        downsampled=downsampled,
        aggregated_samples=int(row.get("n_samples", 1)),
    )


@dataclass(frozen=True)
class RetentionResult:
    downsampled_rows: int
    aggregates_written: int
    aggregates_dropped: int


class TelemetryStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def insert(self, samples: list[GpuSample]) -> None:
        if not samples:
            return
        with self.store.transaction() as db:
            db.table("telemetry").insert_all((sample_to_row(s) for s in samples), replace=True)

    def query(
        self, gpu_index: int | None, since_ns: int, until_ns: int, limit: int
    ) -> tuple[list[GpuSample], bool]:
        """Samples with since <= ts < until, oldest first, both tables; the newest ``limit`` kept."""
        where = "ts_ns >= ? AND ts_ns < ?"
        params: list[Any] = [since_ns, until_ns]
        if gpu_index is not None:
            where += " AND gpu_index = ?"
            params.append(gpu_index)
        cols = ", ".join(_COMMON)
        sql = (
            f"SELECT * FROM ("
            f" SELECT {cols}, processes, errors, 1 AS n_samples, 0 AS downsampled"
            f" FROM telemetry WHERE {where}"
            f" UNION ALL"
            f" SELECT {cols}, '[]', '[]', n_samples, 1 FROM telemetry_1m WHERE {where}"
            f") ORDER BY ts_ns DESC, gpu_index LIMIT ?"
        )
        with self.store.reading() as db:
            rows = list(db.query(sql, [*params, *params, limit + 1]))
        truncated = len(rows) > limit
        rows = rows[:limit]
        rows.reverse()
        return [row_to_sample(r, bool(r["downsampled"])) for r in rows], truncated

    def count(self) -> tuple[int, int]:
        with self.store.reading() as db:
            return db["telemetry"].count, db["telemetry_1m"].count

    def apply_retention(self, now_ns: int, full_rate_s: float, downsampled_s: float) -> RetentionResult:
        cutoff = now_ns - int(full_rate_s * 1e9)
        cutoff -= cutoff % MINUTE_NS  # only whole minutes, so a bucket is folded exactly once
        drop_before = now_ns - int(downsampled_s * 1e9)
        means = ", ".join(f"AVG({c})" for c in _MEAN_COLUMNS)
        int_means = ", ".join(f"CAST(ROUND(AVG({c})) AS INTEGER)" for c in _INT_MEAN_COLUMNS)
        # SQLite has no bitwise-OR aggregate: OR together MAX(x & bit) for every known bit.
        reasons_or = " | ".join(f"MAX(clock_event_reasons & {bit})" for bit, _ in CLOCK_EVENT_REASONS)
        bucket = f"(ts_ns - (ts_ns % {MINUTE_NS}))"
        cols = ", ".join(("gpu_index", "ts_ns", "uuid", *_MEAN_COLUMNS, *_INT_MEAN_COLUMNS))
        fold = (
            f"INSERT INTO telemetry_1m ({cols}, clock_event_reasons, n_samples) "
            f"SELECT gpu_index, {bucket} AS b, MAX(uuid), {means}, {int_means}, {reasons_or}, COUNT(*) "
            f"FROM telemetry WHERE ts_ns < ? GROUP BY gpu_index, b "
            f"ON CONFLICT (gpu_index, ts_ns) DO NOTHING"
        )
        with self.store.transaction() as db:
            written = db.execute(fold, [cutoff]).rowcount
            folded = db.execute("DELETE FROM telemetry WHERE ts_ns < ?", [cutoff]).rowcount
            dropped = db.execute("DELETE FROM telemetry_1m WHERE ts_ns < ?", [drop_before]).rowcount
        return RetentionResult(folded, written, dropped)
