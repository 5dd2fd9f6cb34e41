"""The catalog: every lever gitmd may try, by name, in one explicit table.

Names are those of ``gitmd.analysis.causes.LEVERS``; a test checks that every lever a cause selects
is here.
"""

from __future__ import annotations

from typing import Any

from gitmd.levers.base import Kind, Lever, Risk
from gitmd.levers.device import PowerLimit, SmClockLock
from gitmd.levers.host import CpuAffinity, SchedPriority
from gitmd.levers.launch_env import (
    AllocExpandableSegments,
    AllocGcThreshold,
    AllocKeepCache,
    AllocMaxSplitSize,
    CpuThreads,
    CudaDeviceMaxConnections,
    CudnnBenchmark,
    DataloaderPinMemory,
    DataloaderWorkers,
    EnvLever,
    Tf32Override,
)
from gitmd.levers.shim_knobs import (
    AllocKeepCacheLive,
    CotenantYield,
    MempoolRelease,
    PinHostBuffer,
    StreamPriority,
    SyncSpin,
)

CATALOG: dict[str, type[Lever]] = {
    cls.name: cls
    for cls in (
        Tf32Override,
        AllocExpandableSegments,
        AllocGcThreshold,
        AllocMaxSplitSize,
        AllocKeepCache,
        AllocKeepCacheLive,
        CudaDeviceMaxConnections,
        CpuThreads,
        CudnnBenchmark,
        DataloaderPinMemory,
        DataloaderWorkers,
        CpuAffinity,
        SchedPriority,
        StreamPriority,
        MempoolRelease,
        PinHostBuffer,
        CotenantYield,
        SyncSpin,
        PowerLimit,
        SmClockLock,
    )
}


def env_variables() -> frozenset[str]:
    """Every environment variable a launch lever of the catalog sets: the only ones a policy may."""
    return frozenset(v for cls in CATALOG.values() for v in getattr(cls, "variables", ()))


class PolicyEnv(EnvLever):
    """A policy's whole environment, as one launch lever: how a node confirms a policy another node
    learned (the fleet) on its own runs, by the same launch trial as any lever. Not in the catalog:
    no cause selects it. Its risk is the highest of the catalog levers whose variables it sets."""

    name = "policy_env"
    acts_through = ""

    def __init__(self, policy: int, env: dict[str, str]) -> None:
        super().__init__(policy=policy, env=dict(env))
        owners = [cls for cls in CATALOG.values() if set(getattr(cls, "variables", ())) & set(env)]
        risks = {cls.risk for cls in owners}
        self.risk = next((r for r in (Risk.NUMERICS, Risk.MEMORY) if r in risks), Risk.SAFE)
        self.variables = tuple(sorted(env))

    def values(self) -> dict[str, str]:
        return dict(self.setting["env"])

    def describe(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in sorted(self.setting["env"].items()))
        return f"policy {self.setting['policy']} ({env})"


def make(name: str, **setting: Any) -> Lever:
    if name == PolicyEnv.name:
        return PolicyEnv(**setting)
    try:
        return CATALOG[name](**setting)
    except KeyError:
        raise KeyError(f"no lever named {name!r} (known: {', '.join(sorted(CATALOG))})") from None


def for_causes(causes: list[str], allow_device: bool = False) -> list[type[Lever]]:
    """The catalog's levers that address any of ``causes`` (device levers only when allowed)."""
    out = []
    for cls in CATALOG.values():
        if cls.kind is Kind.DEVICE and not allow_device:
            continue
        if cls.causes & set(causes):
            out.append(cls)
    return out
