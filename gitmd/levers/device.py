"""Device levers: the GPU's power limit and SM clock lock.

Off unless ``access.allow_device_levers = true`` and the caller is root (``Access.check_device_levers``,
checked by the experiment engine before planning one). Implemented by the simulated backend only:
the project never changes a real card's settings in tests or benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitmd.errors import TelemetryError
from gitmd.levers.base import Kind, Lever, LeverError, Target


def _backend(target: Target) -> Any:
    if target.backend is None or not target.gpus:
        raise LeverError("a device lever needs the job's GPUs and the telemetry backend")
    return target.backend


class PowerLimit(Lever):
    """Set the GPUs' power limit to ``watts``: a card held at its limit (throttling, power cap) runs
    its clocks higher under a higher one."""

    name = "power_limit"
    kind = Kind.DEVICE
    causes = frozenset({"throttling", "power_cap"})
    what = "power limit"

    def resources(self) -> frozenset[str]:
        return frozenset({"device:power"})

    def capture(self, target: Target) -> dict[str, Any]:
        b = _backend(target)
        try:
            return {"mw": {str(g): b.power_limit_mw(g) for g in target.gpus}}
        except (TelemetryError, IndexError) as e:
            raise LeverError(f"power_limit: {e}") from None

    def apply(self, target: Target) -> None:
        b = _backend(target)
        mw = int(self.setting["watts"] * 1000)
        try:
            for g in target.gpus:
                b.set_power_limit_mw(g, mw)
        except (TelemetryError, IndexError, ValueError) as e:
            raise LeverError(f"power_limit: {e}") from None

    def verify(self, target: Target) -> None:
        b = _backend(target)
        want = int(self.setting["watts"] * 1000)
        for g in target.gpus:
            if b.power_limit_mw(g) != want:
                raise LeverError(f"GPU {g}'s power limit is {b.power_limit_mw(g)} mW, not {want}")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        b = _backend(target)
        try:
            for g, mw in saved.get("mw", {}).items():
                b.set_power_limit_mw(int(g), int(mw))
        except (TelemetryError, IndexError, ValueError) as e:
            raise LeverError(f"power_limit revert: {e}") from None


class SmClockLock(Lever):
    """Lock the GPUs' SM clock at ``mhz``: a steady clock instead of one that slows down with the
    card's temperature or power."""

    name = "clocks"
    kind = Kind.DEVICE
    causes = frozenset({"throttling"})
    what = "locked SM clock"

    def resources(self) -> frozenset[str]:
        return frozenset({"device:clocks"})

    def capture(self, target: Target) -> dict[str, Any]:
        b = _backend(target)
        try:
            return {"mhz": {str(g): b.locked_sm_clock_mhz(g) for g in target.gpus}}
        except (TelemetryError, IndexError) as e:
            raise LeverError(f"clocks: {e}") from None

    def apply(self, target: Target) -> None:
        b = _backend(target)
        try:
            for g in target.gpus:
                b.lock_sm_clock_mhz(g, int(self.setting["mhz"]))
        except (TelemetryError, IndexError, ValueError) as e:
            raise LeverError(f"clocks: {e}") from None

    def verify(self, target: Target) -> None:
        b = _backend(target)
        for g in target.gpus:
            if b.locked_sm_clock_mhz(g) != int(self.setting["mhz"]):
                raise LeverError(f"GPU {g}'s SM clock is not locked at {self.setting['mhz']} MHz")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        b = _backend(target)
        for g, mhz in saved.get("mhz", {}).items():
            b.lock_sm_clock_mhz(int(g), None if mhz is None else int(mhz))
