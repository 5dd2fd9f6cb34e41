"""What a launcher does with a launch plan (`gitmctl run` and `gitmctl tune`), by the API's contract:
the plan's environment is added to the launcher's own; ``GITM_SITE`` (gitmd's site directory, in a
plan that holds a framework knob) goes first on PYTHONPATH and ``GITM_GUARD`` (the free guard) first
on LD_PRELOAD."""

from __future__ import annotations

import os
import re
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
MAX_SITE_REPORT = 4096  # bytes read back: "site" and a handful of variable names per process
MAX_ACTED = 16
_KNOB = re.compile(r"^GITMD_[A-Z0-9_]{1,58}$")


def site_report_file(env: dict[str, str]) -> str:
    """With gitmd's sitecustomize in the job's plan (GITM_SITE), an empty file of this user's, made
    private, named to the job in GITMD_SITE_REPORT (the site appends to it what it did): its path,
    "" when there is no site or no file could be made (the job runs all the same)."""
    if not env.get("GITM_SITE"):
        return ""
    try:
        fd, path = tempfile.mkstemp(prefix="gitmd-site-", suffix=".txt")
        os.close(fd)
    except OSError:
        return ""
    env[SITE_REPORT_VAR] = path
    return path


def read_site_report(path: str) -> tuple[bool, list[str]]:
    """The site report the job's processes left in ``path`` (then removed): whether the site loaded
    with a knob asked, and the knobs that changed something (plain GITMD_* names, at most MAX_ACTED;
    anything else in the file is ignored)."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_SITE_REPORT).decode("ascii", "replace")
    except OSError:
        return False, []
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    lines = {x.strip() for x in text.splitlines()}
    return "site" in lines, sorted(x for x in lines if _KNOB.match(x))[:MAX_ACTED]
