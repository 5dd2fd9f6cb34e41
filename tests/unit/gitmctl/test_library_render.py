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


def test_the_import_limit_is_gitmds_and_a_request_cannot_be_larger() -> None:
    """Hostile-user run (2026-12-04): every request could be 80 MiB, read before its caller was
    judged; 40 refused 78-MiB calls held 1.5 GB of the daemon. The largest request is a library
    document, and gitmctl refuses a larger one before sending it."""
    from gitmctl.commands.library import MAX_IMPORT_BYTES as ctl_limit
    from gitmd.api.server import MAX_RECEIVE_BYTES
    from gitmd.store.library_document import MAX_IMPORT_BYTES

    assert ctl_limit == MAX_IMPORT_BYTES and MAX_IMPORT_BYTES < MAX_RECEIVE_BYTES <= 17 << 20


def test_a_policy_says_what_it_was_learned_with() -> None:
    from gitmctl.commands.library import _learned_with

    assert _learned_with({"source": "live"}) == []
    fw = {"torch": "2.11.0+cu130", "numpy": "2.3.1"}
    assert _learned_with({"frameworks": fw}) == [("numpy 2.3.1, torch 2.11.0+cu130", "-")]
    differ = "torch 2.11.0+cu130 there, 2.10.0 here"
    assert _learned_with({"frameworks": fw, "frameworks_differ": differ})[0][1] == differ


def test_launch_keys_read_as_programs_and_their_command_lines() -> None:
    from gitmctl.commands.library import keys_text

    keys = [
        "uid:1000 nightly",
        "uid:1000 python /w/train.py #command:0123456789abcdef",
        "uid:1000 python /w/train.py #command:fedcba9876543210",
        "uid:1000 bash /w/run.sh #command:00000000000000aa",
    ]
    assert keys_text(keys) == (
        "uid:1000 nightly, uid:1000 python /w/train.py (2 command lines), "
        "uid:1000 bash /w/run.sh (1 command line)"
    )
    assert keys_text([]) == ""
