"""Conversions of ListLevers, CompareOutputs and the equivalence contract."""

from __future__ import annotations

import hashlib
import json

import pytest

from gitmd.api import convert
from gitmd.api.pb import pb
from gitmd.errors import InvalidArgumentError
from gitmd.experiments.equivalence import Check, Verdict, evaluate
from gitmd.levers import describe
from gitmd.levers.registry import CATALOG


def test_a_lever_carries_every_field() -> None:
    msg = convert.lever_to_pb(describe.describe(CATALOG["dataloader_workers"]))
    assert (msg.name, msg.kind, msg.risk) == ("dataloader_workers", "launch", "memory-risk")
    assert msg.launch and not msg.live and not msg.host_only and list(msg.causes) == ["launch_bound"]
    assert dict(msg.env) == {"GITMD_DATALOADER_WORKERS": "4", "GITM_SITE": msg.env["GITM_SITE"]}
    assert list(msg.variables) == ["GITMD_DATALOADER_WORKERS"]
    assert json.loads(msg.defaults_json) == {"value": 4} and msg.summary and msg.changes
    assert (
        list(convert.lever_to_pb(describe.describe(CATALOG["cpu_threads"])).causes) == []
    )  # no cause selects it
    live = convert.lever_to_pb(describe.describe(CATALOG["alloc_keep_cache_live"]))
    assert live.live and not live.launch and live.counterpart == "alloc_keep_cache"
    assert live.risk == "memory-risk" and json.loads(live.defaults_json) == {} and not live.env


def test_the_contract_is_checked_as_it_is_converted() -> None:
    c = pb.EquivalenceContract()
    c.checks.add(kind="stdout_metric", regex=r"loss=(\S+)", rtol=1e-4)
    c.checks.add(kind="output_file", path="/o.txt", compare="checksum")
    contract = convert.contract_from_pb(c)
    assert contract.checks == (
        Check("stdout_metric", rtol=1e-4, regex=r"loss=(\S+)"),
        Check("output_file", path="/o.txt", compare="checksum"),
    )
    assert convert.contract_from_pb(pb.EquivalenceContract()).checks == ()  # the default contract
    bad = pb.EquivalenceContract()
    bad.checks.add(kind="output_file", path="relative.txt", compare="checksum")
    with pytest.raises(InvalidArgumentError, match="absolute"):
        convert.contract_from_pb(bad)


def test_outputs_keep_absence_contents_and_digests() -> None:
    msg = pb.RunOutputs(exit_status=0, payloads=[1.5])
    msg.metrics.add(regex=r"loss=(\S+)", values=[1.0, 0.5])
    msg.files.add(path="/n.txt", data=b"1 2 3")
    msg.files.add(path="/c.bin", sha256=hashlib.sha256(b"xyz").digest())
    msg.files.add(path="/empty", data=b"")
    out = convert.outputs_from_pb(msg, "baseline")
    assert out.exit_status == 0 and out.payloads == (1.5,)
    assert out.metrics == {r"loss=(\S+)": (1.0, 0.5)}
    assert out.files == {"/n.txt": b"1 2 3", "/empty": b""}
    assert out.digests == {"/c.bin": hashlib.sha256(b"xyz").digest()}
    assert out.sha256("/n.txt") == hashlib.sha256(b"1 2 3").digest() and out.sha256("/nope") is None
    assert convert.outputs_from_pb(pb.RunOutputs(), "treatment").exit_status is None  # still running


def test_outputs_beyond_the_limits_are_refused() -> None:
    bad_digest = pb.RunOutputs()
    bad_digest.files.add(path="/c", sha256=b"short")
    with pytest.raises(InvalidArgumentError, match="treatment: file /c: sha256 must be 32 bytes"):
        convert.outputs_from_pb(bad_digest, "treatment")
    many = pb.RunOutputs()
    many.metrics.add(regex="(x)", values=[0.0] * (convert.MAX_OUTPUT_VALUES + 1))
    with pytest.raises(InvalidArgumentError, match="values per metric"):
        convert.outputs_from_pb(many, "baseline")
    files = pb.RunOutputs()
    for i in range(33):
        files.files.add(path=f"/f{i}")
    with pytest.raises(InvalidArgumentError, match="at most 32"):
        convert.outputs_from_pb(files, "baseline")


def test_a_verdict_from_digests_matches_one_from_contents() -> None:
    """A client that sends only a checksummed file's SHA-256 gets the verdict its contents would."""
    c = convert.contract_from_pb(
        pb.EquivalenceContract(
            checks=[pb.EquivalenceCheck(kind="output_file", path="/o", compare="checksum")]
        )
    )

    def run(data: bytes, digest: bool) -> pb.RunOutputs:
        msg = pb.RunOutputs(exit_status=0)
        if digest:
            msg.files.add(path="/o", sha256=hashlib.sha256(data).digest())
        else:
            msg.files.add(path="/o", data=data)
        return convert.outputs_from_pb(msg, "run")

    for a, b in ((b"same", b"same"), (b"same", b"other")):
        full = evaluate(c, run(a, False), run(b, False))
        assert evaluate(c, run(a, True), run(b, True)) == full
        assert evaluate(c, run(a, True), run(b, False)) == full
    msg = convert.verdict_to_pb(
        Verdict(False, ("output file /o: checksum differs",), ("output file /o (checksum)",), True)
    )
    assert not msg.ok and list(msg.failures) == ["output file /o: checksum differs"] and msg.numbers_checked
