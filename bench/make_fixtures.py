"""Builds the committed fixtures from bench/capture_set.py output (one or more capture folders; a
later folder's case replaces an earlier one's): the labelled fingerprint set (each case's first
window, cut to MAX_KERNELS kernels) under tests/fixtures/labelled/ and the planted-cause set (both
windows of each case, cut to PLANTED_S seconds) under tests/fixtures/planted/, each with a manifest.

    python bench/make_fixtures.py CAPTURE_DIR [CAPTURE_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.capture_set import cases as current_cases  # noqa: E402
from gitmd.capture import capture_file  # noqa: E402

MAX_KERNELS = 3000
PLANTED_S = 0.35
OUT = ROOT / "tests" / "fixtures"


def main() -> int:
    # labels, planted causes and side loads as bench/capture_set.py defines them now (a case may
    # have changed role since it was captured); the files from the newest capture of each case
    now = {c.name: c for c in current_cases("stencil_step")}
    cases: dict[str, tuple[Path, dict[str, object]]] = {}
    for d in map(Path, sys.argv[1:]):
        for m in sorted(d.glob("manifest-*.json")):
            for c in json.loads(m.read_text()):
                if len(c["files"]) == 2 and c["name"] in now:
                    n = now[c["name"]]
                    cases[c["name"]] = (d, {**c, "workload": n.workload, "cause": n.cause, "side": n.side})
    labelled, planted = OUT / "labelled", OUT / "planted"
    for folder in (labelled, planted):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.npz"):
            old.unlink()
    lab_manifest, planted_manifest = [], []
    for name, (d, c) in sorted(cases.items()):
        files: list[str] = c["files"]  # type: ignore[assignment]
        w1 = capture_file.loads(d / files[0])
        (labelled / f"{name}.npz").write_bytes(
            capture_file.dumps(capture_file.trim(w1, max_kernels=MAX_KERNELS))
        )
        lab_manifest.append({"file": f"{name}.npz", "workload": c["workload"], "argv": c["argv"][1:]})
        if c["cause"]:
            for i, f in enumerate(files, 1):
                w = capture_file.trim(capture_file.loads(d / f), seconds=PLANTED_S)
                (planted / f"{name}.w{i}.npz").write_bytes(capture_file.dumps(w))
            planted_manifest.append(
                {
                    "case": name,
                    "cause": c["cause"],
                    "history": f"{name}.w1.npz",
                    "window": f"{name}.w2.npz",
                    "side_load": c["side"][1:] if c["side"] else None,
                    "pin": c["pin"],
                }
            )
    (labelled / "manifest.json").write_text(json.dumps(lab_manifest, indent=1) + "\n")
    (planted / "manifest.json").write_text(json.dumps(planted_manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in OUT.rglob("*.npz"))
    print(
        f"{len(lab_manifest)} labelled, {len(planted_manifest)} planted cases; "
        f"fixtures {size / 2**20:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
