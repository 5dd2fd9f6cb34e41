"""The fingerprint benchmark (bench/fingerprint.py) on the committed labelled set of real H200
captures: recall >= 0.95 for the same program across batch, sequence length, grid, seed and restart;
no match between different programs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def test_labelled_set_recall_and_no_false_match() -> None:
    from bench.fingerprint import FIXTURES, evaluate

    r = evaluate(FIXTURES)
    assert r["workloads"] >= 6 and r["captures"] >= 30
    assert not r["no_signature"], r["no_signature"]
    assert r["recall"] >= 0.95, r["misses"]
    assert r["false_matches"] == 0, r["false"]
