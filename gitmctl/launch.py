"""What a launcher does with a launch plan (`gitmctl run` and `gitmctl tune`), by the API's contract:
the plan's environment is added to the launcher's own; ``GITM_SITE`` (gitmd's site directory, in a
plan that holds a framework knob) goes first on PYTHONPATH and ``GITM_GUARD`` (the free guard) first
on LD_PRELOAD; ``GITM_CLOCK`` (gitmd's clock library in the shim's place) asks the launcher for a file
the job's processes stamp when they initialise CUDA (clock_file, read_clock)."""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time
from collections.abc import Mapping

PREPENDED = (("PYTHONPATH", "GITM_SITE"), ("LD_PRELOAD", "GITM_GUARD"))


def job_environment(base: Mapping[str, str], additions: Mapping[str, str]) -> dict[str, str]:
    """What the job runs with: ``base`` (the launcher's environment) plus the plan's ``additions``."""
    env = {**base, **additions}
    for var, source in PREPENDED:
        path = env.get(source)
        if path:
            current = base.get(var)
            env[var] = f"{path}:{current}" if current else path
    return env


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


SITE_REPORT_VAR = "GITMD_SITE_REPORT"
# bytes read back: "site" and a few knob names per process that imported the framework; a longer
# file (thousands of processes) is not read at all: a line that says a knob acted might be past any cap
MAX_SITE_REPORT = 65536
MAX_ACTED = 16
_KNOB = re.compile(r"^GITMD_[A-Z0-9_]{1,58}$")


def site_report_file(env: dict[str, str], plan: Mapping[str, str]) -> str:
    """With gitmd's sitecustomize in the job's ``plan`` (GITM_SITE), an empty private file of this
    user's, named to the job in GITMD_SITE_REPORT (the site appends to it what it did): its path.
    "" when the plan has no site, when this launcher runs inside another job's (the outer launcher
    reads the file it named), or when no file could be made (the job runs all the same)."""
    if not plan.get("GITM_SITE") or os.environ.get(SITE_REPORT_VAR):
        return ""
    try:
        fd, path = tempfile.mkstemp(prefix="gitmd-site-", suffix=".txt")
        os.close(fd)
    except OSError:
        return ""
    env[SITE_REPORT_VAR] = path
    return path


def _read_private(path: str, cap: int) -> bytes | None:
    """The bytes of the private file a launcher made for the job's processes to append to (then
    removed); None — unknown — when it is gone, is not a plain file (the job may replace it: opened
    without following a link, without waiting on a pipe), or is longer than ``cap``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        try:
            os.unlink(path)  # a link the job left in its place: removed, never followed
        except OSError:
            pass
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) <= cap:
            chunk = os.read(fd, cap + 1 - len(data))
            if not chunk:
                break
            data += chunk
        return None if len(data) > cap else data
    except OSError:
        return None
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass


def read_site_report(path: str) -> tuple[bool, list[str]]:
    """The site report the job's processes left in ``path`` (then removed): whether the site
    adjusted the framework in any process, and the knobs that changed something (plain GITMD_*
    names, at most MAX_ACTED; anything else in the file is ignored). (False, []) — unknown — when
    the file cannot be read as the launcher's own (_read_private) or is longer than MAX_SITE_REPORT."""
    data = _read_private(path, MAX_SITE_REPORT)
    if data is None:
        return False, []
    lines = {x.strip() for x in data.decode("ascii", "replace").splitlines()}
    return "site" in lines, sorted(x for x in lines if _KNOB.match(x))[:MAX_ACTED]


# gitmd's clock library (shim/src/clock.c) in a plan for a run with no capture window: the plan names
# it in CUDA_INJECTION64_PATH and says so in CLOCK_PLAN_VAR; the launcher names a private file in
# CLOCK_FILE_VAR, where each process that initialises CUDA appends "cuda <pid> <CLOCK_MONOTONIC ns>"
CLOCK_PLAN_VAR = "GITM_CLOCK"
CLOCK_FILE_VAR = "GITMD_CLOCK_FILE"
MAX_CLOCK_FILE = 65536  # about 1,500 processes' lines; a longer file is not read (unknown)
INJECTION_VAR = "CUDA_INJECTION64_PATH"


def clock_file(env: dict[str, str], plan: Mapping[str, str], base: Mapping[str, str]) -> str:
    """With gitmd's clock library in the job's ``plan``, an empty private file of this user's, named
    to the job in GITMD_CLOCK_FILE: its path. "" when the plan has no clock, when this launcher runs
    inside another job's (the outer launcher reads the file it named), or when no file could be made.
    A clock never displaces an injection library of the user's own (``base``, the launcher's
    environment, names one: a profiler, a tool of theirs): that stays, and the run is timed by its
    launcher alone."""
    if not plan.get(CLOCK_PLAN_VAR):
        return ""
    env.pop(CLOCK_PLAN_VAR, None)
    own = base.get(INJECTION_VAR)
    if own and own != plan.get(INJECTION_VAR):
        env[INJECTION_VAR] = own
        return ""
    if os.environ.get(CLOCK_FILE_VAR):
        return ""
    try:
        fd, path = tempfile.mkstemp(prefix="gitmd-clock-", suffix=".txt")
        os.close(fd)
    except OSError:
        return ""
    env[CLOCK_FILE_VAR] = path
    return path


def read_clock(path: str, started_ns: int, ended_ns: int) -> float | None:
    """The run's length from its first process's CUDA initialisation to its exit (seconds), from the
    stamps its processes left in ``path`` (then removed) and the launcher's own CLOCK_MONOTONIC
    times of its exec (``started_ns``) and exit (``ended_ns``). None — unknown — when no process
    initialised CUDA, the file cannot be read as the launcher's own, or no stamp lies between the
    two (a line the job wrote itself is ignored; one that says a time before exec is not a stamp
    of this run's)."""
    data = _read_private(path, MAX_CLOCK_FILE)
    if data is None:
        return None
    stamps = []
    for text in data.decode("ascii", "replace").splitlines():
        words = text.split()
        if len(words) == 3 and words[0] == "cuda" and words[1].isdigit() and words[2].isdigit():
            ns = int(words[2])
            if started_ns <= ns <= ended_ns:
                stamps.append(ns)
    if not stamps:
        return None
    return (ended_ns - min(stamps)) / 1e9


def process_age_s(stat_text: str | None = None, boottime_s: float | None = None) -> float | None:
    """Seconds since this process started (its interpreter's start: before any import), from its
    start time in /proc/self/stat (clock ticks since boot) against CLOCK_BOOTTIME; None where either
    cannot be read (not Linux). The resolution is a clock tick (10 ms at the usual 100 Hz)."""
    try:
        if stat_text is None:
            with open("/proc/self/stat") as f:
                stat_text = f.read()
        text = stat_text
        start_ticks = int(text.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        now = boottime_s if boottime_s is not None else time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    age = now - start_ticks / os.sysconf("SC_CLK_TCK")
    return age if age >= 0 else None
