"""What every lever is: a kind, a risk, the causes it addresses, and capture / apply / verify /
revert against a target.

``capture`` saves exactly the state ``apply`` will change (per thread, per variable), as JSON, so it
can be stored with the intervention *before* the change and ``revert`` can restore it even from a
restarted daemon: revert goes back to the captured state, never to a default.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


class Kind(enum.Enum):
    LAUNCH = "launch"  # needs a new process: environment of the next launch
    LIVE_HOST = "live-host"  # acts on the running process from outside (affinity, priority)
    LIVE_SHIM = "live-shim"  # acts inside the process through the shim's control page
    DEVICE = "device"  # power limit, clocks: off unless access.allow_device_levers


class Risk(enum.Enum):
    SAFE = "safe"
    NUMERICS = "numerics-changing"  # promoted only with a contract that can see numbers change
    MEMORY = "memory-risk"


class LeverError(Exception):
    """A lever could not capture, apply, verify or revert; the message says what and why."""


@dataclass
class Target:
    """What a lever acts on. Launch levers read and change ``env`` (the launch plan's additions);
    live host levers act on ``pids`` (every thread of each); live shim levers on ``rings``; device
    levers on ``gpus``."""

    job_id: str = ""
    pids: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    backend: Any = None  # the telemetry backend, for device levers
    rings: dict[int, str] = field(default_factory=dict)  # pid -> shim ring file, for live shim levers
    owner_uid: int | None = None  # the job's uid: a ring file must belong to it
    # rings of other jobs' processes a lever may act on (a background co-tenant): pid -> their uid
    ring_uids: dict[int, int] = field(default_factory=dict)


class Lever(ABC):
    name: ClassVar[str]
    kind: ClassVar[Kind]
    risk: Risk = Risk.SAFE  # a class's own; PolicyEnv's is its variables' (per instance)
    causes: ClassVar[frozenset[str]] = frozenset()
    # it acts only on how the job's host threads run (where, at what priority, how they wait): it
    # cannot make a step shorter than the GPU's own work in it (experiments check what they measure
    # against that bound)
    host_only: ClassVar[bool] = False
    # the values a setting that leaves them out gets (the catalog lists them: ListLevers); a key
    # not here must be in the setting (the pid, CPUs or watts gitmd picks for the job)
    defaults: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, **setting: Any) -> None:
        self.setting: dict[str, Any] = dict(setting)

    def setting_or_default(self, key: str) -> Any:
        return self.setting.get(key, self.defaults[key])

    def applies_to(self, causes: Iterable[str]) -> bool:
        return bool(self.causes & set(causes))

    def resources(self) -> frozenset[str]:
        """What it changes; two levers that share a resource never run at once on one job."""
        return frozenset({self.name})

    def conflicts_with(self, other: Lever) -> bool:
        return bool(self.resources() & other.resources())

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in sorted(self.setting.items()))
        return f"{self.name}({args})" if args else self.name

    @abstractmethod
    def capture(self, target: Target) -> dict[str, Any]:
        """The state apply() will change, as JSON."""

    @abstractmethod
    def apply(self, target: Target) -> None: ...

    @abstractmethod
    def verify(self, target: Target) -> None:
        """Raise LeverError unless the change really took effect."""

    @abstractmethod
    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        """Back to ``saved`` (what capture() returned)."""
