"""Chrome/Perfetto trace JSON from a timeline and the NVML samples of its window.

Tracks: one process per captured pid (threads: one per CUDA stream, plus "sync" and "memory"),
and one "GPU n" process whose counter tracks are SM clock, power, utilization and throttling.
Opens in ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gitmd.analysis.timeline import ProcessTimeline, Timeline
from gitmd.records import GpuSample

COPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
MEM_KINDS = {
    0: "unknown",
    1: "pageable",
    2: "pinned",
    3: "device",
    4: "array",
    5: "managed",
    6: "device static",
    7: "managed static",
}
SYNC_TYPES = {1: "event sync", 2: "stream wait event", 3: "stream sync", 4: "context sync"}
SYNC_TID = 1_000_000_000
MEMORY_TID = 1_000_000_001
GPU_PID_BASE = 1_000_000_000


def _us(ns: np.ndarray, base_ns: int) -> np.ndarray:
    return (ns.astype(np.int64) - base_ns) / 1000.0


def _spans(
    cat: str,
    recs: np.ndarray,
    pid: int,
    base_ns: int,
    names: list[str],
    tids: list[int],
    args: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Complete ("X") events for records with start and end times."""
    ts = _us(recs["start_ns"], base_ns).tolist()
    dur = ((recs["end_ns"].astype(np.int64) - recs["start_ns"].astype(np.int64)) / 1000.0).tolist()
    return [
        {"ph": "X", "cat": cat, "name": n, "pid": pid, "tid": t, "ts": a, "dur": d, "args": g}
        for n, t, a, d, g in zip(names, tids, ts, dur, args, strict=True)
    ]


def _process_events(p: ProcessTimeline, base: int) -> list[dict[str, Any]]:
    pid, r, origin = p.pid, p.records, base - p.offset_ns
    k, m, s, y, mem = r.kernels, r.memcpys, r.memsets, r.syncs, r.memory
    streams = sorted(
        set(k["stream_id"].tolist()) | set(m["stream_id"].tolist()) | set(s["stream_id"].tolist())
    )
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"pid {pid}"}}
    ]
    for tid, label in [(int(x), f"stream {x}") for x in streams] + [
        (SYNC_TID, "sync"),
        (MEMORY_TID, "memory"),
    ]:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})

    kernel_names = [r.names.get(n, f"kernel#{n}") for n in k["name_id"].tolist()]
    kernel_args = [
        {"grid": [gx, gy, gz], "block": [bx, by, bz], "device": dev, "correlation": corr}
        for gx, gy, gz, bx, by, bz, dev, corr in zip(
            *(k[f].tolist() for f in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")),
            k["device"].tolist(),
            k["correlation_id"].tolist(),
            strict=True,
        )
    ]
    events += _spans("kernel", k, pid, origin, kernel_names, k["stream_id"].tolist(), kernel_args)

    copy_names = [
        f"{COPY_KINDS.get(c, f'copy{c}')} {MEM_KINDS.get(a, '?')}->{MEM_KINDS.get(b, '?')}"
        for c, a, b in zip(
            m["copy_kind"].tolist(), m["src_kind"].tolist(), m["dst_kind"].tolist(), strict=True
        )
    ]
    events += _spans(
        "memcpy",
        m,
        pid,
        origin,
        copy_names,
        m["stream_id"].tolist(),
        [{"bytes": b} for b in m["bytes"].tolist()],
    )
    events += _spans(
        "memset",
        s,
        pid,
        origin,
        ["memset"] * len(s),
        s["stream_id"].tolist(),
        [{"bytes": b} for b in s["bytes"].tolist()],
    )
    events += _spans(
        "sync",
        y,
        pid,
        origin,
        [SYNC_TYPES.get(t, "sync") for t in y["sync_type"].tolist()],
        [SYNC_TID] * len(y),
        [{"stream": st} for st in y["stream_id"].tolist()],
    )
    for t, op, size, addr, kind in zip(
        _us(mem["start_ns"], origin).tolist(),
        mem["op"].tolist(),
        mem["bytes"].tolist(),
        mem["address"].tolist(),
        mem["mem_kind"].tolist(),
        strict=True,
    ):
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "memory",
                "name": f"{'alloc' if op == 1 else 'free'} {size} B",
                "pid": pid,
                "tid": MEMORY_TID,
                "ts": t,
                "args": {"address": hex(addr), "kind": MEM_KINDS.get(kind, "?")},
            }
        )
    return events


def to_chrome_trace(tl: Timeline, samples: list[GpuSample]) -> dict[str, Any]:
    base = tl.start_real_ns
    events: list[dict[str, Any]] = []
    for p in tl.processes:
        events += _process_events(p, base)
    gpus = sorted({smp.gpu_index for smp in samples})
    for g in gpus:
        events.append(
            {"ph": "M", "name": "process_name", "pid": GPU_PID_BASE + g, "args": {"name": f"GPU {g} (NVML)"}}
        )
    for smp in samples:
        t = (smp.ts_ns - base) / 1000.0
        pid = GPU_PID_BASE + smp.gpu_index
        for name, value in (
            ("SM clock MHz", smp.sm_clock_mhz),
            ("power W", None if smp.power_mw is None else smp.power_mw / 1000),
            ("utilization %", smp.utilization_gpu_pct),
        ):
            if value is not None:
                events.append({"ph": "C", "name": name, "pid": pid, "ts": t, "args": {"value": value}})
        events.append(
            {
                "ph": "C",
                "name": "throttled",
                "pid": pid,
                "ts": t,
                "args": {"value": 1 if smp.throttled else 0},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "job_id": tl.job_id,
            "window_id": tl.window_id,
            "start_unix_ns": tl.start_real_ns,
            "end_unix_ns": tl.end_real_ns,
            "notes": tl.notes,
        },
    }


def dumps(trace: dict[str, Any]) -> bytes:
    return json.dumps(trace, separators=(",", ":")).encode()
