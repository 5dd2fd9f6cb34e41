"""Equivalence contracts: what must hold for a change to leave a job's outputs unchanged.

Checked at registration (a contract that cannot be evaluated is refused there, not discovered in
the middle of an experiment); evaluated by the experiment engine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gitmd.errors import InvalidArgumentError

KINDS = ("exit_status", "payload", "stdout_metric", "output_file")
MAX_CHECKS = 32


@dataclass(frozen=True)
class Check:
    kind: str
    rtol: float = 0.0
    atol: float = 0.0
    regex: str = ""
    path: str = ""
    compare: str = ""


@dataclass(frozen=True)
class Contract:
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def effective(self) -> tuple[Check, ...]:
        """The checks that apply: the default when none were given."""
        return self.checks or (Check("exit_status"), Check("payload", rtol=1e-5, atol=1e-8))

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.__dict__ for c in self.checks]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Contract:
        return Contract(tuple(Check(**c) for c in d.get("checks", [])))


def validate(checks: list[Check]) -> Contract:
    if len(checks) > MAX_CHECKS:
        raise InvalidArgumentError(f"contract: at most {MAX_CHECKS} checks")
    for i, c in enumerate(checks):
        where = f"contract check {i} ({c.kind or 'no kind'})"
        if c.kind not in KINDS:
            raise InvalidArgumentError(f"{where}: kind must be one of {', '.join(KINDS)}")
        for name, v in (("rtol", c.rtol), ("atol", c.atol)):
            if not math.isfinite(v) or v < 0:
                raise InvalidArgumentError(f"{where}: {name} must be a finite number of at least 0")
        if c.kind == "stdout_metric":
            try:
                rx = re.compile(c.regex)
            except re.error as e:
                raise InvalidArgumentError(f"{where}: regex does not compile: {e}") from None
            if rx.groups != 1 or len(c.regex) > 1000:
                raise InvalidArgumentError(f"{where}: regex must have exactly one capture group (the number)")
        if c.kind == "output_file":
            if not c.path.startswith("/") or "\0" in c.path or len(c.path) > 4096:
                raise InvalidArgumentError(f"{where}: path must be absolute")
            if c.compare not in ("checksum", "numeric"):
                raise InvalidArgumentError(f"{where}: compare must be checksum or numeric")
    return Contract(tuple(checks))
