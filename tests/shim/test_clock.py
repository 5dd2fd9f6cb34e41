"""The clock library (shim/src/clock.c), loaded as the CUDA driver loads an injection library
(dlopen, then InitializeInjection): it stamps the launcher's file once per process with its pid and
CLOCK_MONOTONIC, and does nothing else, whatever it is given."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# a process that initialises "CUDA": what the driver does with CUDA_INJECTION64_PATH
DRIVER = (
    "import ctypes, os, sys, time\n"
    "t0 = time.monotonic_ns()\n"
    "lib = ctypes.CDLL(os.environ['CUDA_INJECTION64_PATH'])\n"
    "r = lib.InitializeInjection()\n"
    "print(os.getpid(), t0, time.monotonic_ns(), r)\n"
)


def _init(lib: Path, env: dict[str, str], timeout: float = 30) -> tuple[int, int, int, int]:
    r = subprocess.run(
        [sys.executable, "-c", DRIVER],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "CUDA_INJECTION64_PATH": str(lib), **env},
    )
    assert r.returncode == 0, r.stderr
    pid, t0, t1, ret = (int(x) for x in r.stdout.split())
    return pid, t0, t1, ret


@pytest.fixture
def clock_lib(shim_tools: Path) -> Path:
    lib = shim_tools / "libgitm_clock.so"
    assert lib.is_file(), "make -C shim builds libgitm_clock.so with no CUDA"
    return lib


def test_it_stamps_its_pid_and_monotonic_time(clock_lib: Path, tmp_path: Path) -> None:
    stamp = tmp_path / "clock.txt"
    stamp.write_text("")
    pid, t0, t1, ret = _init(clock_lib, {"GITMD_CLOCK_FILE": str(stamp)})
    assert ret == 1
    word, got_pid, ns = stamp.read_text().split()
    assert (word, int(got_pid)) == ("cuda", pid)
    assert t0 <= int(ns) <= t1  # the launcher's clock: time.monotonic is CLOCK_MONOTONIC


def test_several_processes_append(clock_lib: Path, tmp_path: Path) -> None:
    stamp = tmp_path / "clock.txt"
    stamp.write_text("")
    pids = {_init(clock_lib, {"GITMD_CLOCK_FILE": str(stamp)})[0] for _ in range(3)}
    lines = stamp.read_text().splitlines()
    assert {int(x.split()[1]) for x in lines} == pids and len(lines) == 3


def test_without_its_file_it_does_nothing(clock_lib: Path, tmp_path: Path) -> None:
    missing = tmp_path / "never-made.txt"
    assert _init(clock_lib, {})[3] == 1
    assert _init(clock_lib, {"GITMD_CLOCK_FILE": ""})[3] == 1
    assert _init(clock_lib, {"GITMD_CLOCK_FILE": str(missing)})[3] == 1
    assert not missing.exists()  # never created: only the launcher's own file is written


def test_a_link_is_not_followed(clock_lib: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("keep\n")
    link = tmp_path / "clock.txt"
    link.symlink_to(target)
    assert _init(clock_lib, {"GITMD_CLOCK_FILE": str(link)})[3] == 1
    assert target.read_text() == "keep\n"


def test_a_pipe_with_no_reader_does_not_hold_the_job(clock_lib: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "clock.fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    assert _init(clock_lib, {"GITMD_CLOCK_FILE": str(fifo)}, timeout=20)[3] == 1
    assert time.monotonic() - start < 15


def test_a_full_pipe_does_not_hold_the_job(clock_lib: Path, tmp_path: Path) -> None:
    """A reader that never reads: the write would block; the library's is non-blocking."""
    fifo = tmp_path / "clock.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        w = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            while True:  # fill the pipe
                os.write(w, b"x" * 65536)
        except BlockingIOError:
            pass
        done = threading.Event()
        result: list[int] = []

        def go() -> None:
            result.append(_init(clock_lib, {"GITMD_CLOCK_FILE": str(fifo)}, timeout=20)[3])
            done.set()

        threading.Thread(target=go, daemon=True).start()
        assert done.wait(15), "the library blocked on a full pipe"
        assert result == [1]
        os.close(w)
    finally:
        os.close(fd)


def test_it_exports_only_the_entry_point(clock_lib: Path) -> None:
    out = subprocess.run(["nm", "-D", "--defined-only", str(clock_lib)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm is not installed")
    text = [x.split()[-1] for x in out.stdout.splitlines() if " T " in x]
    assert text == ["InitializeInjection"]
    # and it links no CUDA or CUPTI library: it loads where the shim cannot
    ldd = subprocess.run(["ldd", str(clock_lib)], capture_output=True, text=True).stdout
    assert "cupti" not in ldd and "libcuda" not in ldd
