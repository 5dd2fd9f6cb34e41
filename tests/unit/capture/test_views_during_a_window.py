"""A job's view never waits for its capture window (hostile-user run, 2026-12-04: a user's ring that
no shim answered held the job's lock through a window's acknowledgement timeouts, and every view of
the job waited: root's `gitmctl job` ran past its 10-s timeout, everyone's `gitmctl jobs` took 6-8 s).
While a window holds the job, its processes are read from the headers last read."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from gitmd.capture import abi
from gitmd.capture.process import ProcessCapture
from gitmd.capture.ring import Ring
from gitmd.capture.windows import CaptureManager
from tests.unit.capture.test_shrunk_ring import _live_ring


def test_a_jobs_processes_are_read_while_its_window_is_open(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _live_ring(job_dir, write_ring, "ring-1-1.gitm")
    _live_ring(job_dir, write_ring, "ring-2-2.gitm")
    cm = CaptureManager(abi.load(), ("kernel",), 250)
    cm.track("j", job_dir)
    before = cm.processes("j")
    assert [alive for _, alive in before] == [True, True]

    # a real window on rings no shim serves: it waits out its acknowledgements holding the job
    window = threading.Thread(target=cm.capture, args=("j", 3.0), kwargs={"ack_timeout_s": 2.0})
    window.start()
    jc = cm.get("j")
    assert jc is not None
    for _ in range(200):
        if jc.lock.locked():
            break
        threading.Event().wait(0.01)
    assert jc.lock.locked(), "the window did not start"
    got: list[list] = []
    reader = threading.Thread(target=lambda: got.append(cm.processes("j", wait=False)))
    reader.start()
    reader.join(timeout=1.5)  # the window holds the job for 2 + 3 + 2 s
    assert not reader.is_alive(), "a view of the job waited for its window"
    assert jc.lock.locked()  # it was read while the window held the job
    assert [(st.pid, alive) for st, alive in got[0]] == [(os.getpid(), True)] * 2
    assert [st for st, _ in got[0]] == [st for st, _ in before]  # the headers last read
    # the loop's own readers wait: they decide on what the rings say now
    waited: list[list] = []
    loop_reader = threading.Thread(target=lambda: waited.append(cm.processes("j")))
    loop_reader.start()
    loop_reader.join(timeout=0.5)
    assert loop_reader.is_alive() and jc.lock.locked()
    window.join()
    loop_reader.join(timeout=10)
    assert [alive for _, alive in waited[0]] == [True, True]
    cm.untrack("j")


def test_a_process_not_read_yet_is_listed_not_dropped(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """One found by the lock's holder but not read yet is "unknown"; one whose ring broke is "off"
    with why: a view never loses a process to the moment it is read in."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    path = _live_ring(job_dir, write_ring, "ring-1-1.gitm")
    pc = ProcessCapture(Ring(path))
    st = pc.seen()
    assert (st.pid, st.status, st.reason) == (os.getpid(), "unknown", "not read yet")
    read = pc.status()
    assert pc.seen() == read
    pc.broken = "the file shrank"
    assert (pc.seen().status, pc.seen().reason) == ("off", "the file shrank")
    pc.ring.close()
