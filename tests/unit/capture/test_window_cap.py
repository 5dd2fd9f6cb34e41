"""A duty window closes early once its processes have written its record cap (the launch budget):
a ring standing for a live process, its header's records_written advanced by a thread as the shim's
flushes advance it."""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gitmd.capture import abi
from gitmd.capture.ring import Ring
from gitmd.capture.windows import CaptureManager, JobCapture

_MAPPINGS: list[mmap.mmap] = []


def _live_ring(job_dir: Path, write_ring: Callable[..., Path]) -> Path:
    data = bytearray(write_ring(10, 64).read_bytes())
    data[40:44] = os.getpid().to_bytes(4, "little")
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    path = job_dir / "ring-1-1.gitm"
    path.write_bytes(bytes(data))
    with open(path, "r+b") as f:  # this process maps it, as the shim would: gitmd trusts its pid then
        _MAPPINGS.append(mmap.mmap(f.fileno(), 0))
    return path


def _flushing(path: Path, per_s: int, stop: threading.Event) -> threading.Thread:
    """records_written grows at per_s records a second, in 50-ms flushes, as a launch-heavy job's."""

    def run() -> None:
        ring = Ring(path, abi.load())
        try:
            while not stop.wait(0.05):
                ring.hdr["records_written"] = int(ring.hdr["records_written"]) + per_s // 20
        finally:
            ring.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_window_with_a_record_cap_closes_when_its_processes_reach_it(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    path = _live_ring(job_dir, write_ring)
    mgr = CaptureManager(abi.load(), ("kernel",), 250)
    mgr.track("j", job_dir)
    stop = threading.Event()
    t = _flushing(path, 100_000, stop)  # the H200 launch-bound loop's rate
    try:
        t0 = time.monotonic()
        w = mgr.capture("j", 5.0, ack_timeout_s=0.05, max_records=20_000)
        took = time.monotonic() - t0
        assert 0.75 <= took < 2.5, took  # 20k records in ~0.2 s, but not before CAP_MIN_S; not 5 s
        (note,) = [n for n in w.notes if "launch budget" in n]
        assert "of 5 s" in note and "(20000)" in note
        # without a cap the window lasts what was asked
        t0 = time.monotonic()
        w = mgr.capture("j", 0.6, ack_timeout_s=0.05)
        assert time.monotonic() - t0 >= 0.6 and not [n for n in w.notes if "launch budget" in n]
    finally:
        stop.set()
        t.join()
        mgr.untrack("j")


def test_a_window_asks_the_configured_kinds_and_none_comes_after_the_observation_ends(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A window asks the configured activity kinds and is the job's latest; once the process's
    observation has ended (end_observation; no shim answers here) it gets no window again. A
    process that never opened a window is left alone (it pays nothing)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    path = _live_ring(job_dir, write_ring)
    mgr = CaptureManager(abi.load(), ("kernel", "memcpy", "sync"), 250)
    mgr.track("j", job_dir)
    try:
        full = mgr.capture("j", 0.05, ack_timeout_s=0.05)
        jc = mgr.get("j")
        assert jc is not None and jc.windows == 1 and jc.last is full and len(full.processes) == 1
        ring = Ring(path, abi.load())
        try:
            assert int(ring.ctl["kinds_mask"]) == 1 | 2 | 8
            ring.hdr["windows_opened"] = 1  # as the shim counts the window it opened
        finally:
            ring.close()
        assert mgr.observable("j")
        answers = mgr.end_observation("j", timeout_s=0.05)
        assert list(answers.values()) == [] or all("not acknowledged" in a for a in answers.values())
        assert not mgr.observable("j")
        after = mgr.capture("j", 0.05, ack_timeout_s=0.05)
        assert after.processes == [] and any("observation ended" in n for n in after.notes)
    finally:
        mgr.untrack("j")


def _tracked(tmp_path: Path, write_ring: Callable[..., Path]) -> tuple[CaptureManager, JobCapture]:
    """A job "j" whose one ring names this living process (and is mapped by it)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _live_ring(job_dir, write_ring)
    mgr = CaptureManager(abi.load(), ("kernel",), 250)
    mgr.track("j", job_dir)
    jc = mgr.get("j")
    assert jc is not None
    return mgr, jc


def test_the_jobs_end_never_waits_for_its_open_window(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A 5-s window is open when the job ends: untrack returns at once, the window stops at its next
    poll (saying why), and the rings are closed once the window is done with them. On the H200 the
    exit report waited for the window and a 1.7-s program took 3.7 s under `gitmctl run`. A second
    window asked for before the end, waiting for the first to let go, opens none."""
    mgr, jc = _tracked(tmp_path, write_ring)
    got: list[object] = []
    late: list[BaseException] = []

    def second() -> None:
        try:
            mgr.capture("j", 1.0, ack_timeout_s=0.05)
        except KeyError as e:
            late.append(e)

    t = threading.Thread(target=lambda: got.append(mgr.capture("j", 5.0, ack_timeout_s=0.05)))
    t0 = time.monotonic()
    t.start()
    while not jc.lock.locked():
        time.sleep(0.005)
    t2 = threading.Thread(target=second)  # it has the job already; it waits for the lock
    t2.start()
    time.sleep(0.2)
    u0 = time.monotonic()
    mgr.untrack("j")
    assert time.monotonic() - u0 < 0.1  # not the window's 5 s
    t.join(3)
    t2.join(3)
    assert not t.is_alive() and not t2.is_alive() and time.monotonic() - t0 < 2.0
    (w,) = got
    assert any("the job ended" in n for n in w.notes)  # type: ignore[attr-defined]
    assert jc.opened == 1  # counted as it opened: the run's record says it was observed
    assert len(late) == 1  # no window on the ended job (its rings are being closed)
    deadline = time.monotonic() + 2
    while any(pc.ring._fd >= 0 for pc in jc.procs.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(pc.ring._fd < 0 for pc in jc.procs.values())


def test_a_window_stops_when_its_processes_have_exited(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    mgr, jc = _tracked(tmp_path, write_ring)
    try:
        mgr.discover(jc)
        (pc,) = jc.procs.values()

        def exit_soon() -> None:
            time.sleep(0.3)
            pc.exited = True  # as the pidfd watcher marks it

        threading.Thread(target=exit_soon, daemon=True).start()
        t0 = time.monotonic()
        w = mgr.capture("j", 5.0, ack_timeout_s=0.05)
        assert time.monotonic() - t0 < 2.0
        assert any("its processes exited" in n for n in w.notes)
    finally:
        mgr.untrack("j")


def test_a_window_in_which_a_kernel_launching_process_delivered_none_says_so(
    tmp_path: Path, write_ring: Callable[..., Path], monkeypatch: object
) -> None:
    """H200 2026-12-04: a contended launch-bound job's windows 3-9 held its syncs but no kernel record
    (CUPTI delivered none). Such a window says so, naming the process; its first window (nothing
    before it), windows with kernels, a window with no sync either (a helper process gone idle) and
    one the shim never opened (its count of opened windows did not move) say nothing."""
    import pytest

    from gitmd.capture import windows
    from tests.unit.analysis.test_breakdown import decoded, recs

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _live_ring(job_dir, write_ring)
    kernels = recs("kernels", [(i * 1000, i * 1000 + 500) for i in range(30)])
    syncs = recs("syncs", [(0, 10), (50, 60)])
    # (what the window delivered, whether the shim opened it)
    windows_seen = [
        (decoded(), True),
        (decoded(kernels=kernels), True),
        (decoded(syncs=syncs), True),
        (decoded(kernels=kernels), True),
        (decoded(), True),
        (decoded(syncs=syncs), False),
    ]
    delivered = iter(windows_seen)

    def drain(ring: Ring, *a: object, **k: object) -> object:
        got, opened = next(delivered)
        if opened:  # as the shim counts the windows it opens
            ring.hdr["windows_opened"] = int(ring.hdr["windows_opened"]) + 1
        return got

    monkeypatch.setattr(windows, "drain_decode", drain)
    mgr = CaptureManager(abi.load(), ("kernel",), 250)
    mgr.track("j", job_dir)
    try:
        got = [mgr.capture("j", 0.05, ack_timeout_s=0.01).notes for _ in windows_seen]
    finally:
        mgr.untrack("j")
    said = [[n for n in notes if "no kernel record" in n] for notes in got]
    assert said[0] == said[1] == said[3] == said[4] == said[5] == []
    (note,) = said[2]
    assert f"pid {os.getpid()}" in note and "(2 syncs)" in note and "held 30" in note
