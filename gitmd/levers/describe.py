"""The catalog in words, for clients (ListLevers, `gitmctl levers`): each lever's kind and risk, what
it changes, the causes that select it, when it acts, and what its default setting is.

The causes come from the attribution's cause table (``gitmd.analysis.causes.LEVERS``), the one the
experiment engine follows, not from the levers' own ``causes``; a launch lever's environment is what
its default setting adds to a launch plan, gitmd's site directory included when it needs it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitmd.analysis.causes import LEVERS
from gitmd.levers.base import Kind, Lever
from gitmd.levers.launch_env import KNOB_PREFIX, EnvLever, with_site
from gitmd.levers.registry import CATALOG


@dataclass(frozen=True)
class LeverInfo:
    name: str
    kind: str  # launch, live-host, live-shim, device
    risk: str  # safe, numerics-changing, memory-risk
    summary: str  # what it does, from the lever's documentation
    changes: str  # what it changes, in words
    causes: tuple[str, ...]  # the causes that select it (empty: tried only when asked for)
    launch: bool  # set in the environment of a job's next launch
    live: bool  # applied to a running job and reverted
    host_only: bool  # acts only on how the job's host threads run
    defaults: Mapping[str, Any] = field(default_factory=dict)  # what a setting leaves out
    env: Mapping[str, str] = field(default_factory=dict)  # launch: what the default setting adds
    variables: tuple[str, ...] = ()  # launch: the environment variables it sets
    counterpart: str = ""  # the same change as a lever of the other kind (launch <-> live)
    acts_through: str = ""  # launch: the library that reads its variables ("" : any CUDA process)


def selecting_causes(name: str, table: Mapping[str, tuple[str, ...]] = LEVERS) -> tuple[str, ...]:
    """The causes whose lever list names ``name``, in the table's order."""
    return tuple(cause for cause, levers in table.items() if name in levers)


def _summary(cls: type[Lever]) -> str:
    doc = cls.__dict__.get("__doc__") or ""
    return " ".join(inspect.cleandoc(doc).replace("``", "").split())


def _changes(cls: type[Lever]) -> str:
    if issubclass(cls, EnvLever):
        via = (
            " (read by gitmd's sitecustomize, put first on the job's PYTHONPATH)"
            if any(v.startswith(KNOB_PREFIX) for v in cls.variables)
            else ""
        )
        return f"the environment of the job's next launch: {', '.join(cls.variables)}{via}"
    what = getattr(cls, "what", "setting")
    if cls.kind is Kind.LIVE_HOST:
        return f"the {what} of every thread of the job's running processes, from outside them"
    if cls.kind is Kind.LIVE_SHIM:
        op = getattr(cls, "op_name", "")
        return f"a setting inside the job's running process, through the shim's control page ({op})"
    return f"the {what} of the job's GPUs (off unless access.allow_device_levers = true; root only)"


def describe(cls: type[Lever]) -> LeverInfo:
    launch_forms = {c.live_form: n for n, c in CATALOG.items() if issubclass(c, EnvLever) and c.live_form}
    env: dict[str, str] = {}
    variables: tuple[str, ...] = ()
    counterpart = launch_forms.get(cls.name, "")
    acts_through = ""
    if issubclass(cls, EnvLever):
        env = with_site(cls().values())
        variables = cls.variables
        counterpart = cls.live_form
        acts_through = cls.acts_through
    return LeverInfo(
        name=cls.name,
        kind=cls.kind.value,
        risk=cls.risk.value,
        summary=_summary(cls),
        changes=_changes(cls),
        causes=selecting_causes(cls.name),
        launch=cls.kind is Kind.LAUNCH,
        live=cls.kind is not Kind.LAUNCH,
        host_only=cls.host_only,
        defaults=dict(cls.defaults),
        env=env,
        variables=variables,
        counterpart=counterpart,
        acts_through=acts_through,
    )


def catalog() -> list[LeverInfo]:
    """Every lever of the catalog, in its order."""
    return [describe(cls) for cls in CATALOG.values()]
