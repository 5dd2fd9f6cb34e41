import os
import subprocess
import threading

from gitmd.jobs.liveness import ProcessWatcher, start_ticks


def test_exit_is_reported_once_and_promptly() -> None:
    w = ProcessWatcher()
    try:
        p = subprocess.Popen(["sleep", "60"])
        ended = threading.Event()
        seen: list[int] = []

        def on_exit(pid: int) -> None:
            seen.append(pid)
            ended.set()

        ticks = start_ticks(p.pid)
        assert ticks is not None and w.watch(p.pid, ticks, on_exit)
        assert w.watching() == 1 and not ended.wait(0.3)
        p.kill()
        p.wait()
        assert ended.wait(5) and seen == [p.pid]
        assert w.watching() == 0
    finally:
        w.close()


def test_a_different_process_under_the_same_pid_is_refused() -> None:
    w = ProcessWatcher()
    try:
        ticks = start_ticks(os.getpid())
        assert ticks is not None
        assert not w.watch(os.getpid(), ticks + 1, lambda pid: None)  # the start time does not match
        p = subprocess.Popen(["true"])
        p.wait()
        assert not w.watch(p.pid, ticks, lambda pid: None)  # already gone
    finally:
        w.close()
