from collections.abc import Callable
from pathlib import Path

import numpy as np

from gitmd.analysis import timeline
from gitmd.analysis.trace_export import GPU_PID_BASE, dumps, to_chrome_trace
from gitmd.capture.decode import decode
from gitmd.capture.ring import Ring
from gitmd.capture.windows import ProcessWindow, WindowResult
from gitmd.telemetry.backend import GpuSample


def window_from(path: Path) -> WindowResult:
    ring = Ring(path)
    d = decode(ring.drain())
    pw = ProcessWindow(ring.pid, ring.status(), d, ring.clock_pairs())
    return WindowResult("job1", 5, 1796000000000000000, 1796000000010000000, [pw], [])


def test_times_move_to_realtime_and_tracks_are_named(write_ring: Callable[..., Path]) -> None:
    tl = timeline.build(window_from(write_ring(600, 1024)))
    assert len(tl.processes) == 1
    p = tl.processes[0]
    # ring_writer's calibration pair: cupti 1_000_000 <-> real 1796000000000000000
    assert p.offset_ns == 1796000000000000000 - 1_000_000
    samples = [
        GpuSample(
            gpu_index=0,
            uuid="u",
            ts_ns=1796000000000500000,
            sm_clock_mhz=1980.0,
            power_mw=500_000.0,
            clock_event_reasons=("sw_power_cap",),
        )
    ]
    trace = to_chrome_trace(tl, samples)
    ev = trace["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert len(kernels) == 200
    first = min(kernels, key=lambda e: e["ts"])
    assert first["ts"] == 0.0 and first["dur"] == 0.5  # record 0 starts at the window start, 500 ns long
    assert first["name"] == "vector_add(float const*, float const*, float*, int)"
    copies = [e for e in ev if e.get("cat") == "memcpy"]
    assert {c["name"] for c in copies} == {"HtoD pageable->device", "HtoD pinned->device"}
    assert any(e["ph"] == "M" and e["args"]["name"] == "stream 7" for e in ev)
    counters = [e for e in ev if e["ph"] == "C" and e["pid"] == GPU_PID_BASE]
    assert {c["name"] for c in counters} == {"SM clock MHz", "power W", "throttled"}
    assert next(c for c in counters if c["name"] == "throttled")["args"]["value"] == 1
    assert next(c for c in counters if c["name"] == "power W")["args"]["value"] == 500.0
    assert dumps(trace).startswith(b'{"traceEvents":[')


def test_no_calibration_leaves_records_out_with_a_note(write_ring: Callable[..., Path]) -> None:
    w = window_from(write_ring(60, 1024))
    pw = w.processes[0]
    stripped = ProcessWindow(pw.pid, pw.status, pw.records, pw.clock_pairs[:0])
    tl = timeline.build(WindowResult(w.job_id, w.window_id, w.start_real_ns, w.end_real_ns, [stripped], []))
    assert tl.processes == [] and "no clock calibration pair" in tl.notes[0]
    assert timeline.cupti_to_real_offset(np.zeros(0, dtype=pw.clock_pairs.dtype)) is None
