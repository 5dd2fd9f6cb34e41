"""A report kept as JSON comes back the same (every committed H200 capture's report)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gitmd.analysis import report_codec
from gitmd.analysis.report import window_report
from gitmd.capture import capture_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = sorted([*FIXTURES.glob("*.npz"), *(FIXTURES / "planted").glob("*.npz")])


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_a_report_round_trips(path: Path) -> None:
    rep = window_report(capture_file.loads(path), tester=None)
    text = report_codec.dumps(rep)
    back = report_codec.loads(text)
    assert report_codec.dumps(back) == text
    assert [(c.name, c.share, c.ceiling, c.levers) for c in back.causes] == [
        (c.name, c.share, c.ceiling, c.levers) for c in rep.causes
    ]
    assert [x.breakdown for x in back.processes] == [x.breakdown for x in rep.processes]
    assert all(isinstance(c.levers, tuple) for c in back.causes)


def test_nan_and_a_foreign_document() -> None:
    rep = window_report(capture_file.loads(CAPTURES[0]))  # with Granger tests: NaN p-values where untested
    back = report_codec.loads(report_codec.dumps(rep))
    assert len(back.tests) == len(rep.tests)
    for a, b in zip(back.tests, rep.tests, strict=True):
        assert (math.isnan(a.p_value) and math.isnan(b.p_value)) or a.p_value == b.p_value
    for bad in ('{"format": 99, "report": {}}', '{"format": 1, "report": {"job_id": "x"}}', "[]"):
        with pytest.raises(ValueError):
            report_codec.loads(bad)
