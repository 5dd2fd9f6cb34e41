"""`gitmctl tune`: launch levers tried across short runs of a command, in interleaved pairs.

The trials run in the CLI's process, as the user who asked (gitmd never runs a user's command):
each trial is a registered gitmd job (exploration off, so nothing else changes under it), the
reference run is captured so gitmd can attribute it and pick the levers its causes select, the
others run without the shim so its windows add no noise. For each lever, rounds of two runs
alternate their order (AB, BA, ...), and the equivalence contract compares each treatment run's
outputs with its pair's baseline. gitmd itself decides from the figures (``RecordTune``), keeps the
experiments and stores the best promoted lever as a policy of the workload.

This module holds what both sides share: the result of one lever's trials and its validation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gitmd.errors import InvalidArgumentError
from gitmd.levers.base import Kind
from gitmd.levers.launch_env import EnvLever
from gitmd.levers.registry import CATALOG
from gitmd.store.library import check_env

MAX_TRIALS = 200
MAX_NOTES = 64  # checks and failures of one lever
MAX_NOTE_CHARS = 500
MAX_JOB_ID_CHARS = 64
MAX_SETTING_CHARS = 1000


@dataclass(frozen=True)
class TunedLever:
    lever: str
    setting: dict[str, Any]
    trials: tuple[tuple[str, float, str], ...]  # (arm "A"/"B", metric value, trial job id), in run order
    checked: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    numbers_checked: bool = False

    def pairs(self) -> tuple[list[float], list[float]]:
        """Baseline and treatment values, one of each per consecutive pair of trials."""
        if len(self.trials) > MAX_TRIALS:
            raise InvalidArgumentError(f"{self.lever}: at most {MAX_TRIALS} trials")
        if len(self.trials) % 2:
            raise InvalidArgumentError(f"{self.lever}: trials come in pairs ({len(self.trials)} given)")
        a: list[float] = []
        b: list[float] = []
        for i in range(0, len(self.trials), 2):
            pair = {self.trials[i][0]: self.trials[i][1], self.trials[i + 1][0]: self.trials[i + 1][1]}
            if set(pair) != {"A", "B"}:
                raise InvalidArgumentError(f"{self.lever}: trials {i} and {i + 1} are not one A and one B")
            for v in pair.values():
                if not math.isfinite(v) or v <= 0:
                    raise InvalidArgumentError(f"{self.lever}: trial values must be finite and positive")
            a.append(pair["A"])
            b.append(pair["B"])
        return a, b


def tune_lever(t: TunedLever) -> tuple[EnvLever, tuple[list[float], list[float]]]:
    """The catalog launch lever ``t`` names, with its setting checked, and its (baseline,
    treatment) pairs; InvalidArgumentError if anything is wrong."""
    cls = CATALOG.get(t.lever)
    if cls is None or cls.kind is not Kind.LAUNCH or not issubclass(cls, EnvLever):
        launch = sorted(n for n, c in CATALOG.items() if c.kind is Kind.LAUNCH)
        raise InvalidArgumentError(f"{t.lever!r} is not a launch lever (tune tries: {', '.join(launch)})")
    if not isinstance(t.setting, dict) or len(json.dumps(t.setting)) > MAX_SETTING_CHARS:
        raise InvalidArgumentError(f"{t.lever}: the setting must be a small JSON object")
    if any(not isinstance(v, (str, int, float, bool)) for v in t.setting.values()):
        raise InvalidArgumentError(f"{t.lever}: setting values must be strings or numbers")
    lever = cls(**t.setting)
    try:
        env = lever.values()
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{t.lever}: bad setting {t.setting}: {e}") from None
    check_env(env, t.lever)
    # what is stored with the experiment stays small whatever a client sends (tune records of 160 MB
    # in 2 s, hardening issue, item 5): a few short notes, short job ids
    notes = [*t.checked, *t.failures]
    if len(notes) > MAX_NOTES or any(not isinstance(x, str) for x in notes):
        raise InvalidArgumentError(f"{t.lever}: at most {MAX_NOTES} checks and failures, each a string")
    if any(len(str(jid)) > MAX_JOB_ID_CHARS for _, _, jid in t.trials):
        raise InvalidArgumentError(f"{t.lever}: a trial's job id is at most {MAX_JOB_ID_CHARS} characters")
    return lever, t.pairs()
