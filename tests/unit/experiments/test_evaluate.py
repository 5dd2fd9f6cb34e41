from __future__ import annotations

import io

import numpy as np

from gitmd.experiments.equivalence import Check, Contract, Outputs, evaluate


def test_default_contract_exit_status_and_payloads() -> None:
    c = Contract()
    base = Outputs(exit_status=0, payloads=(2.302, 2.1, 1.9))
    assert evaluate(c, base, Outputs(exit_status=0, payloads=(2.302, 2.1, 1.9))).ok
    v = evaluate(c, base, Outputs(exit_status=0, payloads=(2.302, 2.2, 1.9)))
    assert not v.ok and "value 1 differs" in v.failures[0]
    assert not evaluate(c, base, Outputs(exit_status=1, payloads=(2.302, 2.1, 1.9))).ok
    v = evaluate(c, base, Outputs(exit_status=0, payloads=(float("nan"),)))
    assert not v.ok and "NaN" in v.failures[0]
    v = evaluate(c, Outputs(exit_status=0), Outputs(exit_status=0))  # nothing copied: not numbers
    assert v.ok and not v.numbers_checked


def test_stdout_metric_within_tolerance() -> None:
    c = Contract((Check("stdout_metric", rtol=1e-3, regex=r"loss ([-+0-9.eE]+|nan|inf)"),))
    base = Outputs(exit_status=0, stdout="step 0 loss 2.5\nstep 1 loss 1.25\n")
    assert evaluate(c, base, Outputs(exit_status=0, stdout="loss 2.5001\nloss 1.2501\n")).ok
    assert not evaluate(c, base, Outputs(exit_status=0, stdout="loss 2.6\nloss 1.25\n")).ok
    assert not evaluate(c, base, Outputs(exit_status=0, stdout="loss nan\n")).ok
    v = evaluate(c, base, Outputs(exit_status=0, stdout="no numbers\n"))
    assert not v.ok and "nothing to compare" in v.failures[0]


def test_output_files() -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([1.0, 2.0, 3.0]))
    close = io.BytesIO()
    np.save(close, np.array([1.0, 2.0, 3.0000001]))
    c = Contract((Check("output_file", path="/o.npy", compare="numeric", rtol=1e-6),))
    assert evaluate(
        c, Outputs(files={"/o.npy": buf.getvalue()}), Outputs(files={"/o.npy": close.getvalue()})
    ).ok
    s = Contract((Check("output_file", path="/o.txt", compare="checksum"),))
    assert not evaluate(s, Outputs(files={"/o.txt": b"a"}), Outputs(files={"/o.txt": b"b"})).ok
    assert not evaluate(s, Outputs(files={"/o.txt": b"a"}), Outputs()).ok


def test_a_checksum_from_a_digest_and_a_numeric_file_needs_contents() -> None:
    import hashlib

    c = Contract((Check("output_file", path="/o", compare="checksum"),))
    digest = {"/o": hashlib.sha256(b"data").digest()}
    v = evaluate(c, Outputs(exit_status=0, digests=digest), Outputs(exit_status=0, files={"/o": b"data"}))
    assert v.ok and v.checked == ("output file /o (checksum)",) and v.numbers_checked
    v = evaluate(c, Outputs(digests=digest), Outputs(digests={"/o": hashlib.sha256(b"else").digest()}))
    assert v.failures == ("output file /o: checksum differs",)
    assert evaluate(c, Outputs(digests=digest), Outputs()).failures == ("output file /o: missing",)
    numeric = Contract((Check("output_file", path="/o", compare="numeric"),))
    assert evaluate(numeric, Outputs(digests=digest), Outputs(digests=digest)).failures == (
        "output file /o: missing",
    )
    records = io.BytesIO()
    np.save(records, np.zeros(2, dtype=[("a", "f8"), ("b", "i4")]))
    v = evaluate(
        numeric, Outputs(files={"/o": records.getvalue()}), Outputs(files={"/o": records.getvalue()})
    )
    assert not v.ok and "not numbers" in v.failures[0]
