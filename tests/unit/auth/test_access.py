from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest

from gitmd.api.pb import pb
from gitmd.auth.access import ADMIN, READER, RPC_NEEDS, SCHEDULER, Access
from gitmd.auth.tokens import Peer
from gitmd.errors import PermissionDeniedError


def some_group() -> grp.struct_group:
    return grp.getgrgid(os.getgid())


def test_every_rpc_has_a_need() -> None:
    assert set(RPC_NEEDS) == {m.name for m in pb.DESCRIPTOR.services_by_name["Gitmd"].methods}


def test_roles_come_from_groups_the_kernel_reported() -> None:
    g = some_group()
    acc = Access(read_group=g.gr_name, admin_group="no-such-group-gitm")
    user = acc.local(Peer(uid=1234, gid=999_999, groups=frozenset({999_999}), pid=1))
    assert user.roles == frozenset() and not user.is_reader
    reader = acc.local(Peer(uid=1234, gid=999_999, groups=frozenset({g.gr_gid}), pid=1))
    assert reader.roles == {READER}
    admin = Access(admin_group=g.gr_name).local(Peer(uid=1234, gid=1, groups=frozenset({g.gr_gid}), pid=1))
    assert {READER, ADMIN} <= admin.roles
    root = acc.local(Peer(uid=0, gid=0, groups=frozenset({0}), pid=1))
    assert root.roles == {READER, ADMIN, SCHEDULER} and root.is_root


def test_needs_are_enforced() -> None:
    acc = Access(read_group="no-such-group-gitm", admin_group="no-such-group-gitm")
    user = acc.local(Peer(uid=1234, gid=1234, groups=frozenset({1234}), pid=1))
    acc.check(user, "RegisterJob")
    acc.check(user, "WhoAmI")
    for rpc in ("GetStatus", "ListAudit", "PinPolicy", "ImportLibrary", "NotAnRpc"):
        with pytest.raises(PermissionDeniedError):
            acc.check(user, rpc)


def test_jobs_belong_to_their_uid() -> None:
    acc = Access(read_group="no-such-group-gitm")
    a = acc.local(Peer(uid=1001, gid=100, groups=frozenset({100}), pid=1))
    root = acc.local(Peer(uid=0, gid=0, groups=frozenset(), pid=1))
    assert acc.may_touch_job(a, 1001) and not acc.may_touch_job(a, 1002)
    assert acc.may_read_job(root, 1001) and acc.may_touch_job(root, 1001)
    assert acc.registration_owner(a, 1001, 5) == (1001, 100)  # gid from the kernel, not the request
    assert acc.registration_owner(a, 0, 0) == (1001, 100)  # unset
    with pytest.raises(PermissionDeniedError, match="cannot register a job for uid 1002"):
        acc.registration_owner(a, 1002, 100)
    assert acc.registration_owner(root, 1002, 7) == (1002, 7)  # a prolog registering for the user


def test_remote_subjects_and_device_levers() -> None:
    acc = Access(remote_subjects={"slurm-ctl": "scheduler"})
    sched = acc.remote("slurm-ctl")
    assert sched.uid is None and sched.roles == {SCHEDULER, READER} and sched.acts_for_others
    assert not acc.may_touch_job(sched, 1001) and acc.may_close_job(sched, 1001)
    with pytest.raises(PermissionDeniedError, match="no role"):
        acc.remote("intruder")
    root = acc.local(Peer(uid=0, gid=0, groups=frozenset(), pid=1))
    with pytest.raises(PermissionDeniedError, match="allow_device_levers"):
        acc.check_device_levers(root)
    on = Access(allow_device_levers=True)
    on.check_device_levers(root)
    with pytest.raises(PermissionDeniedError, match="need root"):
        on.check_device_levers(on.local(Peer(uid=5, gid=5, groups=frozenset(), pid=1)))


def test_a_flood_of_bad_tokens_is_audited_at_a_bounded_rate(tmp_path: Path) -> None:
    from gitmd.auth.gate import UNAUTHENTICATED_ROWS_PER_S, Gate
    from gitmd.auth.tokens import TokenAuthority
    from gitmd.errors import UnauthenticatedError
    from gitmd.store.audit import Audit
    from gitmd.store.db import Store

    class Ctx:
        def peer(self) -> str:
            return "unix:"

        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return (("gitm-token", "v1.forged.token"),)

    log = Audit(Store(tmp_path / "s.db"))
    gate = Gate(TokenAuthority(), Access(), log)
    for _ in range(500):
        with pytest.raises(UnauthenticatedError):
            gate.admit(Ctx(), "GetStatus")
    rows = log.list(limit=10_000)
    assert UNAUTHENTICATED_ROWS_PER_S <= len(rows) <= 3 * UNAUTHENTICATED_ROWS_PER_S
    assert all(r.outcome == "unauthenticated" for r in rows)


def test_one_callers_refusals_are_audited_at_a_bounded_rate_and_others_still_are(tmp_path: Path) -> None:
    """Hardening issue, item 5: refused calls were audited at 1,412 rows/s, a way to fill the disk.
    A caller's refusals are written at most REFUSED_ROWS_PER_S a second; the rows left out are
    counted in the next row written for that caller; another caller's refusals are not held back."""
    import time

    from gitmd.auth.access import Caller
    from gitmd.auth.gate import REFUSED_ROWS_PER_S, Gate
    from gitmd.auth.tokens import TokenAuthority
    from gitmd.store.audit import Audit
    from gitmd.store.db import Store

    log = Audit(Store(tmp_path / "s.db"))
    gate = Gate(TokenAuthority(), Access(), log)
    mallory = Caller("uid 1666 (mallory)", frozenset(), uid=1666)
    alice = Caller("uid 1001 (alice)", frozenset(), uid=1001)
    for _ in range(1000):
        gate.record(mallory, "RevertIntervention", "denied", detail="not hers")
    gate.record(alice, "GetJob", "denied", detail="not hers")
    rows = log.list(limit=10_000)
    theirs = [r for r in rows if r.actor == mallory.name]
    assert REFUSED_ROWS_PER_S <= len(theirs) <= 3 * REFUSED_ROWS_PER_S
    assert [r.actor for r in rows].count(alice.name) == 1
    time.sleep(1.05)  # the next second: the next row says how many were left out
    gate.record(mallory, "RevertIntervention", "denied", detail="not hers")
    # the rows left out are counted in the next row of a later second (the 1,000 calls may span two)
    theirs = [r for r in log.list(limit=10_000) if r.actor == mallory.name]
    assert any("more refusals of uid 1666 (mallory)" in r.detail for r in theirs)
    gate.record(mallory, "GetStatus", "ok")  # what succeeds is never held back
    assert log.list(limit=1)[0].outcome == "ok"
