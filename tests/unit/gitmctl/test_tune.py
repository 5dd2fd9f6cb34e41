"""`gitmctl tune`'s side of CompareOutputs: what each trial sends, and requests that keep each
numeric output file's contents in a request of their own, the contract's order kept."""

from __future__ import annotations

import hashlib

from gitmctl.client import pb
from gitmctl.commands.tune import Trial, _segments


def _checks() -> list[pb.EquivalenceCheck]:
    return [
        pb.EquivalenceCheck(kind="stdout_metric", regex=r"loss=(\S+)"),
        pb.EquivalenceCheck(kind="output_file", path="/a", compare="checksum"),
        pb.EquivalenceCheck(kind="output_file", path="/n1", compare="numeric"),
        pb.EquivalenceCheck(kind="output_file", path="/n2", compare="numeric"),
        pb.EquivalenceCheck(kind="exit_status"),
    ]


def test_each_numeric_file_is_compared_alone_in_the_contracts_order() -> None:
    segs = _segments(_checks())
    assert [[c.path or c.kind for c in s] for s in segs] == [
        ["stdout_metric", "/a"],
        ["/n1"],
        ["/n2"],
        ["exit_status"],
    ]
    assert _segments([pb.EquivalenceCheck(kind="exit_status")]) == [[pb.EquivalenceCheck(kind="exit_status")]]
    assert _segments([]) == []


def test_a_trial_sends_only_what_the_checks_compare() -> None:
    t = Trial(
        1.0, 1.0, 0, "j1",
        metrics={r"loss=(\S+)": [1.0, 0.5]},
        files={"/n1": b"1 2", "/n2": b"3"},
        digests={"/a": hashlib.sha256(b"a").digest()},
    )  # fmt: skip
    first, n1, _, last = (t.outputs(s) for s in _segments(_checks()))
    assert first.exit_status == 0 and [(m.regex, list(m.values)) for m in first.metrics] == [
        (r"loss=(\S+)", [1.0, 0.5])
    ]
    assert [(f.path, f.data, f.sha256) for f in first.files] == [("/a", b"", hashlib.sha256(b"a").digest())]
    assert [(f.path, f.data) for f in n1.files] == [("/n1", b"1 2")] and not n1.metrics
    assert last.HasField("exit_status") and not last.files and not last.metrics
    # a file that could not be read is left out: gitmd reports it missing
    assert not Trial(1.0, 1.0, 0, "j").outputs([_checks()[2]]).files
