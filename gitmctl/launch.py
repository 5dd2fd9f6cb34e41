"""What a launcher does with a launch plan (`gitmctl run` and `gitmctl tune`), by the API's contract:
the plan's environment is added to the launcher's own; ``GITM_SITE`` (gitmd's site directory, in a
plan that holds a framework knob) goes first on PYTHONPATH and ``GITM_GUARD`` (the free guard) first
on LD_PRELOAD."""

from __future__ import annotations

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
