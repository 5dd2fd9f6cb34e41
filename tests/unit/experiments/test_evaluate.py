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
