"""Chrome/Perfetto trace JSON from a timeline and the NVML samples of its window.

Tracks: one process per captured pid (threads: one per CUDA stream, plus "sync" and "memory"),
and one "GPU n" process whose counter tracks are SM clock, power, utilization and throttling.
Opens in ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gitmd.analysis.timeline import Timeline
from gitmd.telemetry.backend import GpuSample

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


def to_chrome_trace(tl: Timeline, samples: list[GpuSample]) -> dict[str, Any]:
    base = tl.start_real_ns
    events: list[dict[str, Any]] = []
    for p in tl.processes:
        pid = p.pid
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"pid {pid}"}})
        r = p.records
        k = r.kernels
        streams = (
            set(k["stream_id"].tolist())
            | set(r.memcpys["stream_id"].tolist())
            | set(r.memsets["stream_id"].tolist())
        )
        for s in sorted(streams):
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": int(s), "args": {"name": f"stream {s}"}}
            )
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": SYNC_TID, "args": {"name": "sync"}}
        )
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": MEMORY_TID, "args": {"name": "memory"}}
        )
        off = p.offset_ns
        ts = _us(k["start_ns"], base - off)
        dur = (k["end_ns"].astype(np.int64) - k["start_ns"].astype(np.int64)) / 1000.0
        for i in range(len(k)):
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": r.names.get(int(k["name_id"][i]), f"kernel#{int(k['name_id'][i])}"),
                    "pid": pid,
                    "tid": int(k["stream_id"][i]),
                    "ts": float(ts[i]),
                    "dur": float(dur[i]),
                    "args": {
                        "grid": [int(k["grid_x"][i]), int(k["grid_y"][i]), int(k["grid_z"][i])],
                        "block": [int(k["block_x"][i]), int(k["block_y"][i]), int(k["block_z"][i])],
                        "device": int(k["device"][i]),
                        "correlation": int(k["correlation_id"][i]),
                    },
                }
            )
        m = r.memcpys
        ts = _us(m["start_ns"], base - off)
        dur = (m["end_ns"].astype(np.int64) - m["start_ns"].astype(np.int64)) / 1000.0
        for i in range(len(m)):
            kind = COPY_KINDS.get(int(m["copy_kind"][i]), f"copy{int(m['copy_kind'][i])}")
            src, dst = MEM_KINDS.get(int(m["src_kind"][i]), "?"), MEM_KINDS.get(int(m["dst_kind"][i]), "?")
            events.append(
                {
                    "ph": "X",
                    "cat": "memcpy",
                    "name": f"{kind} {src}->{dst}",
                    "pid": pid,
                    "tid": int(m["stream_id"][i]),
                    "ts": float(ts[i]),
                    "dur": float(dur[i]),
                    "args": {"bytes": int(m["bytes"][i])},
                }
            )
        s = r.memsets
        ts = _us(s["start_ns"], base - off)
        dur = (s["end_ns"].astype(np.int64) - s["start_ns"].astype(np.int64)) / 1000.0
        for i in range(len(s)):
            events.append(
                {
                    "ph": "X",
                    "cat": "memset",
                    "name": "memset",
                    "pid": pid,
                    "tid": int(s["stream_id"][i]),
                    "ts": float(ts[i]),
                    "dur": float(dur[i]),
                    "args": {"bytes": int(s["bytes"][i])},
                }
            )
        y = r.syncs
        ts = _us(y["start_ns"], base - off)
        dur = (y["end_ns"].astype(np.int64) - y["start_ns"].astype(np.int64)) / 1000.0
        for i in range(len(y)):
            events.append(
                {
                    "ph": "X",
                    "cat": "sync",
                    "name": SYNC_TYPES.get(int(y["sync_type"][i]), "sync"),
                    "pid": pid,
                    "tid": SYNC_TID,
                    "ts": float(ts[i]),
                    "dur": float(dur[i]),
                    "args": {"stream": int(y["stream_id"][i])},
                }
            )
        mem = r.memory
        ts = _us(mem["start_ns"], base - off)
        for i in range(len(mem)):
            op = "alloc" if int(mem["op"][i]) == 1 else "free"
            events.append(
                {
                    "ph": "i",
                    "s": "t",
                    "cat": "memory",
                    "name": f"{op} {int(mem['bytes'][i])} B",
                    "pid": pid,
                    "tid": MEMORY_TID,
                    "ts": float(ts[i]),
                    "args": {
                        "address": hex(int(mem["address"][i])),
                        "kind": MEM_KINDS.get(int(mem["mem_kind"][i]), "?"),
                    },
                }
            )
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
