"""`gitmctl tune`'s side of CompareOutputs: what each trial sends, and requests that keep each
numeric output file's contents in a request of their own, the contract's order kept."""

from __future__ import annotations

import hashlib

import pytest

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


def test_the_reference_runs_causes_come_from_its_steady_state_not_its_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """H200 2026-12-03: the fp32 MLP ran no kernel for its first 10 s; a probe 3 s in attributed
    its start-up, found no cause, and tune tried nothing. The probe now takes the latest window's
    attribution until a window has found the step, and that one's once it has."""
    import gitmctl.commands.tune as tune_mod

    monkeypatch.setattr(tune_mod, "PROBE_AFTER_S", 0.0)
    monkeypatch.setattr(tune_mod.time, "sleep", lambda s: None)
    polls = {"n": 0}
    startup = pb.Attribution(causes=[pb.Cause(name="pageable_copy", above_threshold=True)])
    steady = pb.Attribution(causes=[pb.Cause(name="fp32_gemm", above_threshold=True)])

    class Stub:
        GetJob, GetAttribution = "GetJob", "GetAttribution"

    class Client:
        stub = Stub()

        def call(self, method: str, req: object) -> object:
            if method == "GetJob":
                polls["n"] += 1
                found = polls["n"] >= 4  # its step is found in the fourth poll's window
                return pb.Job(
                    processes=[pb.ProcessInfo(pid=1)], step=pb.StepStats(found=found, steps=5 if found else 0)
                )
            return steady if polls["n"] >= 4 else startup

    class Child:
        def poll(self) -> None:
            return None

    tuner = tune_mod.Tuner.__new__(tune_mod.Tuner)
    tuner.client = Client()  # type: ignore[assignment]
    tuner.causes = []
    tuner._probe("j1", Child())  # type: ignore[arg-type]
    assert [c.name for c in tuner.causes] == ["fp32_gemm"] and polls["n"] == 4
