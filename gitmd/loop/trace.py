"""An on-demand trace of a running job (`gitmctl trace`): one window, as a Chrome trace with the
GPU's telemetry beside it or as the raw capture file; the window counts as any other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gitmd.analysis import timeline as timeline_mod
from gitmd.analysis.trace_export import dumps, to_chrome_trace
from gitmd.capture import capture_file
from gitmd.errors import GitmdError, InvalidArgumentError
from gitmd.jobs.registry import Job
from gitmd.loop.deps import Deps
from gitmd.loop.observe import Observe
from gitmd.store.telemetry import TelemetryStore

MAX_TRACE_S = 300.0
TRACE_CHUNK = 1 << 20


@dataclass(frozen=True)
class TraceResult:
    chunks: Iterator[bytes]
    summary: dict[str, Any]


def trace(
    d: Deps, observe: Observe, telemetry: TelemetryStore, job: Job, duration_s: float, raw: bool
) -> TraceResult:
    """``duration_s`` checked by the caller (0..MAX_TRACE_S; 0: the configured window length)."""
    if d.capture is None or not job.capture:
        raise InvalidArgumentError(f"job {job.id} ({job.name}) runs without the shim: nothing to trace")
    if job.state in ("exited", "lost"):
        raise InvalidArgumentError(f"job {job.id} ({job.name}) has ended ({job.state})")
    if d.capture.get(job.id) is None:
        raise GitmdError(f"job {job.id} is not tracked by capture (was gitmd restarted?)")
    window = d.capture.capture(job.id, duration_s or d.config.capture.window_duration_s)
    steps = observe.after_window(window)
    tl = timeline_mod.build(window)
    if raw:
        data = capture_file.dumps(window)
    else:
        samples, _ = telemetry.query(None, tl.start_real_ns - 10**9, tl.end_real_ns + 10**9, 100_000)
        data = dumps(to_chrome_trace(tl, samples))
    summary = {
        "job_id": job.id,
        "window_id": tl.window_id,
        "processes": len(tl.processes),
        "kernels": tl.count("kernels"),
        "memcpys": tl.count("memcpys"),
        "memsets": tl.count("memsets"),
        "syncs": tl.count("syncs"),
        "memory_ops": tl.count("memory"),
        "ring_drops": sum(p.ring_drops for p in tl.processes),
        "cupti_drops": sum(p.cupti_drops for p in tl.processes),
        "window_s": (tl.end_real_ns - tl.start_real_ns) / 1e9,
        "notes": tl.notes,
        "step": steps,
    }
    return TraceResult((data[i : i + TRACE_CHUNK] for i in range(0, len(data), TRACE_CHUNK)), summary)
