"""Real H200 captures (tests/fixtures/README.md) through the daemon's decoder, timeline and trace export."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gitmd.analysis import timeline
from gitmd.analysis.trace_export import to_chrome_trace
from gitmd.capture import capture_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PAGEABLE, PINNED, HTOD = 1, 2, 1


def test_non_torch_program_window_holds_the_known_work() -> None:
    w = capture_file.loads(FIXTURES / "capture-cuda-known-work.npz")
    (p,) = w.processes
    r = p.records
    probe = next(i for i, n in r.names.items() if n.startswith("gitm_probe_kernel"))
    assert r.names[probe] == "gitm_probe_kernel(float*, int)"  # demangled
    assert int(np.sum(r.kernels["name_id"] == probe)) == 1000
    assert np.all(r.kernels["block_x"] == 256) and np.all(r.kernels["grid_x"] == 4096)
    htod = r.memcpys[r.memcpys["copy_kind"] == HTOD]
    assert int(np.sum(htod["src_kind"] == PAGEABLE)) == 10 and int(np.sum(htod["src_kind"] == PINNED)) == 10
    assert np.all(htod["bytes"] == 4 << 20)
    assert sorted(r.memory[r.memory["bytes"] == 64 << 20]["op"].tolist()) == [1, 2]
    assert np.all(r.kernels["end_ns"] > r.kernels["start_ns"])
    assert p.status.ring_drops == 0 and p.status.cupti_drops == 0 and p.status.cupti_version >= 130000


def test_torch_window_has_main_and_child_processes() -> None:
    w = capture_file.loads(FIXTURES / "capture-torch-known-work.npz")
    counts = sorted(len(p.records.kernels) for p in w.processes if len(p.records.kernels))
    assert counts == [300, 500]
    main = next(p.records for p in w.processes if len(p.records.kernels) == 500)
    htod = main.memcpys[main.memcpys["copy_kind"] == HTOD]
    assert int(np.sum(htod["src_kind"] == PAGEABLE)) == 8 and int(np.sum(htod["src_kind"] == PINNED)) == 8


def test_training_window_becomes_an_aligned_trace() -> None:
    w = capture_file.loads(FIXTURES / "capture-torch-train.npz")
    tl = timeline.build(w)
    (p,) = tl.processes
    k = p.records.kernels
    assert len(k) > 1000
    names = set(p.records.names.values())
    assert any("gemm" in n.lower() or "cutlass" in n.lower() for n in names), names
    real_start = int(k["start_ns"].min()) + p.offset_ns
    assert w.start_real_ns - 10**9 < real_start < w.end_real_ns, "kernel times land inside the window"
    trace = to_chrome_trace(tl, [])
    assert sum(e.get("cat") == "kernel" for e in trace["traceEvents"]) == len(k)
