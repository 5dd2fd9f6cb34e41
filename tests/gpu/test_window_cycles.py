"""On the GPU host: capture windows opened and closed many times a second on launch-bound jobs
never hurt them. The scoreboard's contended part saw one run under gitmd die of SIGABRT
(H200, 2026-12-03, cause not known); this drives the shim's window cycle (enable, flush, detach at
the next API exit, re-attach) hundreds of times on one thread and on several launching threads at
once, free and squeezed onto two busy cores, and compares each job's output with its plain run.

The daemon paces windows by its duty budget (6, 12 and 20 or more windows in the three runs on the
H200, 2026-12-03); the shim's cycle at a fixed, faster pace, with no daemon, is bench/window_stress.py
(tests/gpu/run.sh window-stress), which found the start-up and exit crashes the shim now avoids
(bench/results/2026-12-03-window-stress-h200.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.oracle import stop_hogs
from tests.integration.conftest import ROOT, Daemon, command, ctl_json

PROGRAMS = Path(__file__).parent / "programs"
HOG = ROOT / "bench" / "workloads" / "cpu_hog.py"
CONFIG = """
[telemetry]
backend = "nvml"
[metrics]
port = 0
[capture]
window_every_s = 0.3
window_duration_s = 0.1
first_window_s = 0.05
startup_every_s = 0.3
overhead_budget = 1.0
[experiments]
enabled = false
"""


@pytest.fixture
def cycling(daemon_factory: Any) -> Daemon:
    if not (ROOT / "shim" / "build" / "libgitm_shim.so").exists():
        pytest.fail("the shim is not built: tests/gpu/run.sh builds it with make -C shim")
    return daemon_factory(config_text=CONFIG)  # type: ignore[no-any-return]


def two_cores() -> list[str]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 4:
        pytest.skip("needs four CPUs")
    return ["taskset", "-c", f"{cpus[-2]},{cpus[-1]}"]


def result(out: str) -> str:
    lines = [x for x in out.splitlines() if x.startswith("result ")]
    assert lines, out[-2000:]
    return re.sub(r" step_ms=\S+", "", lines[-1])  # its timing may change, nothing else


@pytest.mark.timeout(500)
@pytest.mark.parametrize(
    "argv,squeezed",
    [
        ([str(ROOT / "bench" / "workloads" / "launch_bound.py"), "--steps", "40000"], False),
        ([str(PROGRAMS / "threads_launch.py"), "60000", "4"], False),
        ([str(PROGRAMS / "threads_launch.py"), "30000", "4"], True),
    ],
    ids=["one-thread", "four-threads", "four-threads-on-two-busy-cores"],
)
def test_windows_cycling_on_a_launch_bound_job_leave_it_unchanged(
    cycling: Daemon, argv: list[str], squeezed: bool
) -> None:
    pin = two_cores() if squeezed else []
    hogs = (
        subprocess.Popen(
            [*pin, sys.executable, str(HOG), "--procs", "4", "--seconds", "600"], start_new_session=True
        )
        if squeezed
        else None
    )
    try:
        plain = subprocess.run([*pin, sys.executable, *argv], capture_output=True, text=True, timeout=200)
        assert plain.returncode == 0, plain.stderr[-2000:]
        under = subprocess.run(
            [*pin, *command("gitmctl"), "--socket", str(cycling.socket), "run", "--name", "cycles", "--",
             sys.executable, *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )  # fmt: skip
    finally:
        stop_hogs(hogs)
    assert under.returncode == 0, f"exit {under.returncode} under gitmd:\n{under.stderr[-3000:]}"
    job = ctl_json(cycling.socket, "job", "cycles")
    windows = int(job["windows"])
    print(f"{argv[0].rsplit('/', 1)[-1]} squeezed={squeezed}: {windows} windows; {result(under.stdout)}")
    assert windows >= 5, f"only {windows} windows: the cycle was not exercised"
    assert result(under.stdout) == result(plain.stdout), "the job's output changed"
