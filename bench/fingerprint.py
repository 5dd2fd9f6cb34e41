"""Fingerprint benchmark on the labelled set of real H200 captures (tests/fixtures/labelled, from
bench/capture_set.py): every pair of captures compared; same-workload pairs should match (recall),
different-workload pairs must not (false matches). Targets: recall >= 0.95, false matches 0.

    python bench/fingerprint.py [--fixtures DIR] [--json FILE]
    python bench/fingerprint.py --corpus DIR [--json FILE]

--corpus reads the windows the corpus scoreboard kept (DIR/**/windows-<program>.tgz, from
bench/corpus/scoreboard.py), each labelled by its program: the fingerprint on programs nobody here
wrote and it was not tuned on (convergence issue, item 2).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.analysis.fingerprint import MATCH_THRESHOLD, Signature, signature, similarity  # noqa: E402
from gitmd.analysis.report import busiest  # noqa: E402
from gitmd.analysis.steps import detect  # noqa: E402
from gitmd.capture import capture_file  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "labelled"


def signatures(folder: Path) -> list[tuple[str, str, Signature | None, str]]:
    out = []
    for case in json.loads((folder / "manifest.json").read_text()):
        w = capture_file.loads(folder / case["file"])
        main = busiest(w)
        sig, why = None, "no kernels"
        if main is not None:
            r = main.records.timed()
            st = detect(r.kernels["name_id"], r.kernels["start_ns"])
            sig = signature(r, st) if st.found else None
            why = "" if sig is not None else (st.reason or "no complete step")
        out.append((case["file"].removesuffix(".npz"), case["workload"], sig, why))
    return out


def corpus_folder(root: Path, into: Path) -> Path:
    """The corpus scoreboard's window archives under ``root`` unpacked into ``into``, with a
    manifest.json labelling each window by its program (as tests/fixtures/labelled has)."""
    cases = []
    for tgz in sorted(root.rglob("windows-*.tgz")):
        program = tgz.name.removeprefix("windows-").removesuffix(".tgz")
        dest = into / f"{len(cases):03d}-{program}"
        with tarfile.open(tgz) as tar:
            tar.extractall(dest, filter="data")  # no links, no paths out of dest
        for npz in sorted(dest.rglob("*.npz")):
            cases.append({"file": str(npz.relative_to(into)), "workload": program})
    (into / "manifest.json").write_text(json.dumps(cases, indent=1))
    return into


def evaluate(folder: Path) -> dict[str, object]:
    sigs = signatures(folder)
    same, cross, misses, false = 0, 0, [], []
    hits = 0
    same_sims: list[float] = []
    cross_sims: list[tuple[float, str, str]] = []
    for a, b in itertools.combinations(sigs, 2):
        s = similarity(a[2], b[2]) if a[2] is not None and b[2] is not None else 0.0
        if a[1] == b[1]:
            same += 1
            same_sims.append(s)
            if s >= MATCH_THRESHOLD:
                hits += 1
            else:
                misses.append((a[0], b[0], round(s, 3)))
        else:
            cross += 1
            cross_sims.append((s, a[0], b[0]))
            if s >= MATCH_THRESHOLD:
                false.append((a[0], b[0], round(s, 3)))
    return {
        "captures": len(sigs),
        "workloads": len({s[1] for s in sigs}),
        "no_signature": [(s[0], s[3]) for s in sigs if s[2] is None],
        "same_pairs": same,
        "cross_pairs": cross,
        "recall": hits / same if same else 0.0,
        "false_matches": len(false),
        "misses": misses,
        "false": false,
        "threshold": MATCH_THRESHOLD,
        "min_same_similarity": round(min(same_sims), 3) if same_sims else None,
        "median_same_similarity": round(sorted(same_sims)[len(same_sims) // 2], 3) if same_sims else None,
        "max_cross_similarity": (lambda m: [round(m[0], 3), m[1], m[2]])(max(cross_sims))
        if cross_sims
        else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", type=Path, default=FIXTURES)
    ap.add_argument("--corpus", type=Path, help="a folder of the corpus scoreboard's windows-<program>.tgz")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.corpus is not None:
        with tempfile.TemporaryDirectory(prefix="gitmd-fp-") as tmp:
            r = evaluate(corpus_folder(a.corpus, Path(tmp)))
    else:
        r = evaluate(a.fixtures)
    print(f"{r['captures']} captures of {r['workloads']} workloads, threshold {r['threshold']}")
    print(f"same-workload pairs {r['same_pairs']}: recall {r['recall']:.3f} (target >= 0.95)")
    print(f"cross-workload pairs {r['cross_pairs']}: false matches {r['false_matches']} (target 0)")
    print(
        f"similarity: same-workload min {r['min_same_similarity']}, median {r['median_same_similarity']}; "
        f"cross-workload max {r['max_cross_similarity']}"
    )
    for m in r["misses"]:  # type: ignore[attr-defined]
        print(f"  missed: {m}")
    for f in r["false"]:  # type: ignore[attr-defined]
        print(f"  false match: {f}")
    for n in r["no_signature"]:  # type: ignore[attr-defined]
        print(f"  no signature: {n}")
    if a.json:
        a.json.write_text(json.dumps(r, indent=1))
    ok = r["recall"] >= 0.95 and r["false_matches"] == 0  # type: ignore[operator]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
