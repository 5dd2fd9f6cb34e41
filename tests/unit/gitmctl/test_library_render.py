"""`gitmctl library show`: where each policy came from (the fleet issue: a policy learned on another
node is shown as from the fleet, with its node)."""

from __future__ import annotations

import json

from gitmctl.commands.library import _policy_row
from gitmd.api.pb import pb


def test_a_policy_says_where_it_came_from() -> None:
    fleet = pb.Policy(
        id=7, status="validated", evidence_json=json.dumps({"source": "fleet", "node": "gpu-12"})
    )
    fleet.env["OMP_NUM_THREADS"] = "4"
    row = _policy_row(fleet, active=7)
    assert row[1] == "validated *" and row[5] == "fleet: gpu-12" and row[6] == "OMP_NUM_THREADS=4"
    assert (
        _policy_row(pb.Policy(id=8, status="validated", evidence_json='{"source": "live"}'), 7)[5] == "live"
    )
    assert _policy_row(pb.Policy(id=9, status="reverted"), 7)[5] == "-"
