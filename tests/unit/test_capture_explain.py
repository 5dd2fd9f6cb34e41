"""ExplainCapture's work: a capture file's bytes (and earlier ones of the same job) to the report a
job's own window gets; hostile files are the caller's error, never the daemon's."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from gitmd import capture_explain
from gitmd.api import convert
from gitmd.errors import InvalidArgumentError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "capture-cuda-known-work.npz"


def test_a_capture_file_is_explained_from_its_bytes() -> None:
    data = FIXTURE.read_bytes()
    report = capture_explain.explain_capture(("w.npz", data), top=3)
    (p,) = convert.attribution_to_pb(report).processes  # as ExplainCapture answers
    assert p.pageable_copies == 10 and p.step.found and 0 < len(p.top_kernels) <= 3
    assert report.history_windows == 0
    again = capture_explain.explain_capture(("w.npz", data), [("w1.npz", data)], top=0)
    assert again.history_windows == 1 and again.processes[0].top_kernels == []


def test_what_is_no_capture_file_is_refused_with_its_name() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^bad\.npz: not a gitm capture file"):
        capture_explain.explain_capture(("bad.npz", b"not a capture"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("meta.npy", b"\x93NUMPY garbage")
    with pytest.raises(InvalidArgumentError, match=r"^h\.npz: not a gitm capture file"):
        capture_explain.explain_capture(("w.npz", FIXTURE.read_bytes()), [("h.npz", buf.getvalue())])


def test_files_that_unpack_too_large_are_refused_before_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_explain, "MAX_UNPACKED", 1000)
    with pytest.raises(InvalidArgumentError, match="unpack to more than"):
        capture_explain.explain_capture(("w.npz", FIXTURE.read_bytes()))
    with pytest.raises(InvalidArgumentError, match="at most 32 history files"):
        capture_explain.explain_capture(("w.npz", b""), [("h", b"")] * 33)


def test_history_of_another_job_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from gitmd.capture import capture_file

    real = capture_file.loads
    job_ids = iter(["other", "mine"])  # the history file's, then the capture's

    def loads(data: bytes) -> object:
        return dataclasses.replace(real(data), job_id=next(job_ids))

    monkeypatch.setattr(capture_file, "loads", loads)
    with pytest.raises(InvalidArgumentError, match="another job"):
        capture_explain.explain_capture(("w.npz", FIXTURE.read_bytes()), [("h.npz", FIXTURE.read_bytes())])
