"""A ring's header is written by the job's user, so the pid it names proves nothing (hardening
issue, reproduced on the landed code: a ring naming another user's processes made gitmd list them
under the attacker's job and renice them). gitmd takes a ring's pid only when that process maps
the ring file and runs as the job's user."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.capture import abi
from gitmd.capture.windows import CaptureManager
from gitmd.jobs.liveness import ring_owner_problem, start_ticks

_MAPPER = """
import mmap, os, sys, time
m = mmap.mmap(os.open(sys.argv[1], os.O_RDWR), 0)
print("mapped", flush=True)
time.sleep(60)
"""


def _naming(write_ring: Callable[..., Path], job_dir: Path, pid: int) -> Path:
    data = bytearray(write_ring(10 + pid % 1000, 64).read_bytes())
    data[40:44] = pid.to_bytes(4, "little")
    data[48:56] = int(start_ticks(pid) or 0).to_bytes(8, "little")
    path = job_dir / f"ring-{pid}-1.gitm"
    path.write_bytes(bytes(data))
    return path


def test_a_ring_naming_a_process_that_does_not_map_it_is_not_trusted(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        while start_ticks(victim.pid) is None:
            time.sleep(0.01)
        spoof = _naming(write_ring, job_dir, victim.pid)
        st = spoof.stat()
        why = ring_owner_problem(victim.pid, start_ticks(victim.pid) or 0, st.st_dev, st.st_ino, os.getuid())
        assert "does not map this ring file" in why
        assert "runs as uid" in ring_owner_problem(
            victim.pid, start_ticks(victim.pid) or 0, st.st_dev, st.st_ino, os.getuid() + 1
        )
        cm = CaptureManager(abi.load(), ("kernel",), 250)
        cm.track("j", job_dir)
        assert cm.processes("j") == [] and cm.ring_paths("j") == {}  # never listed, never acted on
    finally:
        victim.kill()
        victim.wait()


def test_the_process_that_maps_its_ring_is_taken(tmp_path: Path, write_ring: Callable[..., Path]) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    holder = tmp_path / "hold"
    holder.write_bytes(b"\0" * 4096)
    child = subprocess.Popen([sys.executable, "-c", _MAPPER, str(holder)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "mapped"
        path = _naming(write_ring, job_dir, child.pid)
        # the child maps another file, not this ring: refused; once it maps the ring: taken
        cm = CaptureManager(abi.load(), ("kernel",), 250)
        cm.track("j", job_dir)
        assert cm.processes("j") == []
        st = path.stat()
        assert ring_owner_problem(child.pid, start_ticks(child.pid) or 0, st.st_dev, st.st_ino, os.getuid())
        # a ring of a process that has ended is no problem: gitmd never acts on it
        child.kill()
        child.wait()
        assert ring_owner_problem(child.pid, 1, st.st_dev, st.st_ino, os.getuid()) == ""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_folder_full_of_empty_ring_files_costs_a_bounded_scan(tmp_path: Path) -> None:
    """Hardening issue, item 4: 20,000 empty ring files in a job's folder made every GetJob take 13 s
    (each one opened at every discovery). At most MAX_RINGS_PER_JOB are considered, said once."""
    import gitmd.capture.windows as windows

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    for i in range(3000):
        (job_dir / f"ring-{100000 + i}-1.gitm").touch()
    cm = CaptureManager(abi.load(), ("kernel",), 250)
    cm.track("j", job_dir)
    opened: list[str] = []
    real = windows.Ring

    def counting(path: str, *a: object, **kw: object) -> object:
        opened.append(path)
        return real(path, *a, **kw)  # type: ignore[arg-type]

    windows.Ring = counting  # type: ignore[assignment,misc]
    try:
        assert not cm.observable("j")
    finally:
        windows.Ring = real  # type: ignore[misc]
    assert len(opened) == windows.MAX_RINGS_PER_JOB
    jc = cm.get("j")
    assert jc is not None and jc.too_many


def test_a_ring_of_a_process_that_has_exited_but_is_not_reaped_is_no_problem(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    """A short job's process can end before gitmd first reads its ring: between its exit and its
    parent's wait it is a zombie with the same pid and start time that maps nothing any more. That
    is an ended process, not a spoofed one (seen on the H200: "names pid 1423, which does not map
    this ring file: not trusted" for a 1.7-s CuPy run); gitmd never acts on it either way."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = None
    while ticks is None:
        ticks = start_ticks(zombie.pid)
    try:
        deadline = time.monotonic() + 10
        while "\nState:\tZ" not in Path(f"/proc/{zombie.pid}/status").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        path = _naming(write_ring, job_dir, zombie.pid)
        st = path.stat()
        assert ring_owner_problem(zombie.pid, ticks, st.st_dev, st.st_ino, os.getuid()) == ""
        # a kernel thread maps nothing and runs on: a ring naming one is refused (kthreadd, pid 2)
        kthreadd = start_ticks(2)
        if kthreadd is not None:
            assert ring_owner_problem(2, kthreadd, st.st_dev, st.st_ino, os.getuid()) != ""
    finally:
        zombie.wait()


def test_a_users_bad_ring_files_cannot_flood_roots_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hostile-user run (2026-12-04): each bad ring file wrote one warning into root's log (5,000
    files, 5,000 lines). A job's first BAD_RINGS_LOGGED are logged, then one line says the rest are not."""
    import logging

    import gitmd.capture.windows as windows

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    for i in range(40):
        (job_dir / f"ring-{100000 + i}-1.gitm").touch()  # empty: truncated, ignored
    cm = CaptureManager(abi.load(), ("kernel",), 250)
    cm.track("j", job_dir)
    with caplog.at_level(logging.WARNING, logger="gitmd.capture.windows"):
        assert not cm.observable("j")
    jc = cm.get("j")
    assert jc is not None and len(jc.bad) == 40
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == windows.BAD_RINGS_LOGGED + 1 and "the rest are not logged" in lines[-1]
