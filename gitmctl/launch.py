"""What a launcher does with a launch plan (`gitmctl run` and `gitmctl tune`), by the API's contract:
the plan's environment is added to the launcher's own; ``GITM_SITE`` (gitmd's site directory, in a
plan that holds a framework knob) goes first on PYTHONPATH and ``GITM_GUARD`` (the free guard) first
on LD_PRELOAD."""

from __future__ import annotations

import os
import re
import stat
import tempfile
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


def read_site_report(path: str) -> tuple[bool, list[str]]:
    """The site report the job's processes left in ``path`` (then removed): whether the site
    adjusted the framework in any process, and the knobs that changed something (plain GITMD_*
    names, at most MAX_ACTED; anything else in the file is ignored). (False, []) — unknown — when
    the file is gone, is not a plain file (the job may replace it: opened without following a link,
    without waiting on a pipe), or is longer than MAX_SITE_REPORT."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        try:
            os.unlink(path)  # a link the job left in its place: removed, never followed
        except OSError:
            pass
        return False, []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False, []
        data = b""
        while len(data) <= MAX_SITE_REPORT:
            chunk = os.read(fd, MAX_SITE_REPORT + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_SITE_REPORT:
            return False, []
    except OSError:
        return False, []
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
    lines = {x.strip() for x in data.decode("ascii", "replace").splitlines()}
    return "site" in lines, sorted(x for x in lines if _KNOB.match(x))[:MAX_ACTED]
