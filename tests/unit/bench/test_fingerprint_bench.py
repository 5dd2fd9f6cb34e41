"""bench/fingerprint.py --corpus: the corpus scoreboard's kept windows, labelled by program."""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LABELLED = ROOT / "tests" / "fixtures" / "labelled"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_fingerprint", ROOT / "bench" / "fingerprint.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_fingerprint"] = mod
    spec.loader.exec_module(mod)
    return mod


def _archive(to: Path, files: list[str]) -> None:
    """As the scoreboard writes it: windows/<job id>/<window id>.npz."""
    with tarfile.open(to, "w:gz") as tar:
        for i, f in enumerate(files):
            tar.add(LABELLED / f, arcname=f"windows/job{i}/{i + 1}.npz")


def test_the_corpus_windows_are_labelled_by_program_and_scored(tmp_path: Path) -> None:
    cases = json.loads((LABELLED / "manifest.json").read_text())
    by = {}
    for c in cases:
        by.setdefault(c["workload"], []).append(c["file"])
    a, b = sorted(w for w, fs in by.items() if len(fs) >= 2)[:2]  # two programs, two windows each
    results = tmp_path / "results" / "call1" / "corpus"
    results.mkdir(parents=True)
    _archive(results / f"windows-{a}.tgz", by[a][:2])
    _archive(results / f"windows-{b}.tgz", by[b][:2])
    fp = _bench()
    folder = fp.corpus_folder(tmp_path / "results", tmp_path / "unpacked")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(c["workload"] for c in manifest) == sorted([a, a, b, b])
    r = fp.evaluate(folder)
    assert r["captures"] == 4 and r["workloads"] == 2
    assert r["same_pairs"] == 2 and r["cross_pairs"] == 4  # the pairs are counted by program
    assert r["false_matches"] == 0
