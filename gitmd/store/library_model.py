"""The library's records: a workload (by fingerprint) with its launch keys and policies, and
which policy a launch gets; with their conversions from the store's rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gitmd.analysis.fingerprint import Signature

STATUSES = ("candidate", "validated", "pinned", "reverted")


@dataclass(frozen=True)
class Policy:
    id: int
    workload_id: str
    env: dict[str, str]
    status: str
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    gpu_model: str = ""
    driver: str = ""
    created_ns: int = 0
    updated_ns: int = 0
    pinned_by: str = ""
    # live levers to apply to each run once its processes are seen (their intent: the stream or
    # the CPUs are found anew in each run), e.g. [{"lever": "stream_priority", "setting": {...}}]
    live: tuple[dict[str, Any], ...] = ()

    @property
    def from_fleet(self) -> bool:
        return self.evidence.get("source") == "fleet"

    @property
    def trust(self) -> int:
        """How much this node's own evidence backs it: 2, learned here or a fleet policy this node
        confirmed on its own runs; 1, from the fleet, not confirmed here yet (applied, and confirmed
        on this node's first runs); 0, from the fleet, suspect on another node and not confirmed
        here, or not held here: never applied at launch."""
        if not self.from_fleet:
            return 2
        confirmed = self.evidence.get("confirmed")
        if isinstance(confirmed, dict):
            return 2 if confirmed.get("held") else 0
        return 0 if self.evidence.get("suspect") else 1

    def rank(self) -> tuple[int, float, float]:
        """The better evidence first: this node's own (trust), then the interval's lower bound
        (a policy without one, an import, by its speedup), then the speedup. A fleet policy this
        node confirmed ranks by what its own runs measured, never by the figures the fleet sent."""
        speed, low = self.speedup or 0.0, self.ci_low
        confirmed = self.evidence.get("confirmed") if self.from_fleet else None
        if isinstance(confirmed, dict):
            ci = confirmed.get("ci")
            here = confirmed.get("speedup")
            speed = float(here) if isinstance(here, (int, float)) else 0.0
            low = float(ci[0]) if isinstance(ci, list) and ci and isinstance(ci[0], (int, float)) else None
        return (self.trust, low if low is not None else speed, speed)


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    signature: Signature
    first_seen_ns: int
    last_seen_ns: int
    run_count: int
    launch_keys: tuple[str, ...] = ()
    policies: tuple[Policy, ...] = ()

    @property
    def active_policy(self) -> Policy | None:
        """The policy for launches of anyone: pinned, else the best validated one that is not
        scoped to one user."""
        return self.active_policy_for(None)

    def active_policy_for(self, uid: int | None) -> Policy | None:
        """The policy a launch by ``uid`` gets: pinned, else the best validated one among those
        for everyone and those scoped to ``uid`` (a user's own `gitmctl tune` results apply to
        that user's launches only, until an admin pins them)."""
        pinned = [p for p in self.policies if p.status == "pinned"]
        if pinned:
            return max(pinned, key=lambda p: p.updated_ns)
        validated = self._usable(uid)
        return max(validated, key=Policy.rank) if validated else None

    def _usable(self, uid: int | None) -> list[Policy]:
        return [
            p
            for p in self.policies
            if p.status == "validated" and p.evidence.get("scope_uid") in (None, uid) and p.trust > 0
        ]

    def choice(self, uid: int | None = None) -> str:
        """Why the policy in force is that one, in words (`gitmctl library show`)."""
        p = self.active_policy_for(uid)
        if p is None:
            return "none"
        if p.status == "pinned":
            return f"policy {p.id}: pinned by {p.pinned_by or 'an admin'}"
        why = "this node's own evidence" if p.trust == 2 else "from the fleet, to be confirmed here"
        low = f"95% lower bound {p.ci_low:.3f}" if p.ci_low is not None else f"{p.speedup or 0:.3f}x"
        others = [
            (f"{q.id}: {q.ci_low:.3f}" if q.ci_low is not None else f"{q.id}: {q.speedup or 0:.3f}x")
            + (" from the fleet, unconfirmed here" if q.trust < p.trust else "")
            for q in self._usable(uid)
            if q.id != p.id and bool(q.live) == bool(p.live)
        ]
        return f"policy {p.id}: {why}, {low}" + (f" (over {', '.join(others)})" if others else "")

    def live_policy_for(self, uid: int | None) -> Policy | None:
        """The policy whose live levers a launch by ``uid`` gets: the active one if it has live
        levers, else the best validated one that has (an environment policy and a live one then
        both apply: they act on different things)."""
        active = self.active_policy_for(uid)
        if active is not None and active.live:
            return active
        if active is not None and active.status == "pinned":
            return None  # a pin is exactly what runs
        live = [p for p in self._usable(uid) if p.live]
        return max(live, key=Policy.rank) if live else None


def signature_json(s: Signature) -> str:
    return json.dumps({"sequence": list(s.sequence), "shares": s.shares}, sort_keys=True)


def signature_from_json(text: str) -> Signature:
    d = json.loads(text)
    return Signature(tuple(d["sequence"]), {str(k): float(v) for k, v in d["shares"].items()})


def policy_from_row(r: dict[str, Any]) -> Policy:
    settings = json.loads(r["settings"])
    return Policy(
        id=r["id"],
        workload_id=r["workload_id"],
        env=settings.get("env", {}),
        live=tuple(settings.get("live", [])),
        status=r["status"],
        speedup=r["speedup"],
        ci_low=r["ci_low"],
        ci_high=r["ci_high"],
        evidence=json.loads(r["evidence"]),
        gpu_model=r["gpu_model"],
        driver=r["driver"],
        created_ns=r["created_ns"],
        updated_ns=r["updated_ns"],
        pinned_by=r["pinned_by"],
    )
