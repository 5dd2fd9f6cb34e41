from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gitmd.capture import capture_file
from gitmd.capture.decode import decode
from gitmd.capture.ring import Ring
from gitmd.capture.windows import ProcessWindow, WindowResult


def test_round_trip(write_ring: Callable[..., Path]) -> None:
    ring = Ring(write_ring(3000, 4096))
    d = decode(ring.drain())
    w = WindowResult("j", 3, 10, 20, [ProcessWindow(ring.pid, ring.status(), d, ring.clock_pairs())], ["n"])
    back = capture_file.loads(capture_file.dumps(w))
    assert (back.job_id, back.window_id, back.start_real_ns, back.end_real_ns, back.notes) == (
        "j",
        3,
        10,
        20,
        ["n"],
    )
    p = back.processes[0]
    assert p.pid == ring.pid and p.status == ring.status()
    assert p.records.names == d.names
    for kind in ("kernels", "memcpys", "memsets", "syncs", "memory", "clocks"):
        assert np.array_equal(getattr(p.records, kind), getattr(d, kind)), kind
    assert np.array_equal(p.clock_pairs, ring.clock_pairs())


@pytest.mark.parametrize(
    "junk", [b"", b"PK\x03\x04garbage", b"\x93NUMPY" + b"\0" * 100, np.random.default_rng(0).bytes(5000)]
)
def test_junk_is_refused(junk: bytes) -> None:
    with pytest.raises(capture_file.CaptureFileError):
        capture_file.loads(junk)


def test_wrong_format_marker_and_bad_arrays(tmp_path: Path) -> None:
    import io
    import json

    buf = io.BytesIO()
    np.savez(buf, meta=np.frombuffer(json.dumps({"format": "other"}).encode(), dtype=np.uint8))
    with pytest.raises(capture_file.CaptureFileError, match="format marker"):
        capture_file.loads(buf.getvalue())
    meta = {
        "format": "gitm-capture",
        "version": 1,
        "abi_version": 1,
        "job_id": "j",
        "window_id": 1,
        "start_real_ns": 0,
        "end_real_ns": 1,
        "processes": [{"pid": 1, "status": {}, "names": {}}],
    }
    buf = io.BytesIO()
    np.savez(
        buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), p0_kernels=np.zeros(63, np.uint8)
    )
    with pytest.raises(capture_file.CaptureFileError):
        capture_file.loads(buf.getvalue())


def test_context_round_trip_and_trim() -> None:
    from gitmd.analysis.report import busiest

    planted = Path(__file__).resolve().parents[2] / "fixtures" / "planted"
    w = capture_file.loads(planted / "cpu-hog.w2.npz")
    c = w.context
    assert len(c.host) > 20 and len(c.gpu) > 20 and c.cores == (2, 3)
    back = capture_file.loads(capture_file.dumps(w))
    assert np.array_equal(back.context.host, c.host) and np.array_equal(back.context.gpu, c.gpu)
    assert (back.context.cores, back.context.gpus, back.context.main_tid) == (c.cores, c.gpus, c.main_tid)
    t = capture_file.trim(w, max_kernels=100)
    main = busiest(t)
    assert main is not None and 100 <= len(main.records.kernels) <= 101
    assert t.end_real_ns < w.end_real_ns and (t.context.host["t_ns"] <= t.end_real_ns).all()


def test_version_1_files_load_with_an_empty_context() -> None:
    old = Path(__file__).resolve().parents[2] / "fixtures" / "capture-torch-train.npz"
    w = capture_file.loads(old)
    assert len(w.context.host) == 0 and w.context.gpus == ()
