#!/usr/bin/env python3
"""Held-out split of the corpus (issue 26, item 2): each program goes to "dev" or "test".

Programs are grouped by `kind`; each group is shuffled with random.Random(SEED) (groups in sorted
order, names sorted inside a group before shuffling) and dealt alternately, the deal carrying on
across groups, so both halves get the same number of each kind (+-1) and of programs in all (+-1).
The result is bench/corpus/split.toml (committed).

Rule (written into split.toml): no fix for a test-half program that is not a general mechanism
tested on the dev half first.

    python3 bench/corpus/split.py            # (re)write split.toml
    python3 bench/corpus/split.py --check    # exit 1 if split.toml differs from what SEED gives

Python 3.11+, standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"
SPLIT = HERE / "split.toml"
SEED = 26_2026
RULE = "no fix for a test-half program that is not a general mechanism tested on the dev half first"


def load_programs(manifest: Path = MANIFEST) -> list[dict]:
    with manifest.open("rb") as f:
        return tomllib.load(f)["program"]


def split(programs: list[dict], seed: int = SEED, existing: dict[str, str] | None = None) -> dict[str, str]:
    """program name -> "dev" / "test"; deterministic for a seed and a set of (name, kind).
    ``existing``: the committed split. A program in it keeps its half (a held-out program never
    moves); only programs new to the manifest are dealt, each kind to the half that has fewer of it."""
    existing = {n: h for n, h in (existing or {}).items() if n in {p["name"] for p in programs}}
    by_kind: dict[str, list[str]] = defaultdict(list)
    for p in programs:
        if p["name"] not in existing:
            by_kind[p["kind"]].append(p["name"])
    rng = random.Random(seed)
    halves = ("dev", "test")
    out: dict[str, str] = dict(existing)
    kind_of = {p["name"]: p["kind"] for p in programs}
    turn = rng.randrange(2)
    for kind in sorted(by_kind):
        names = sorted(by_kind[kind])
        rng.shuffle(names)
        for name in names:
            have = [sum(1 for n, h in out.items() if h == half and kind_of[n] == kind) for half in halves]
            if have[0] != have[1]:
                turn = 0 if have[0] < have[1] else 1
            out[name] = halves[turn]
            turn ^= 1
    return dict(sorted(out.items()))


def render(assignment: dict[str, str], seed: int, date: str) -> str:
    lines = [
        "# Held-out split of bench/corpus/manifest.toml, written by bench/corpus/split.py (do not edit).",
        f"# Rule: {RULE}.",
        "# Tune and fix on the dev half; the test half only measures. A program added to the manifest",
        "# is dealt by rerunning split.py (commit both files together); no program already here moves.",
        "",
        f"seed = {seed}",
        f'date = "{date}"',
        "",
        "[program]",
    ]
    lines += [f'"{name}" = "{half}"' for name, half in assignment.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare split.toml with the seed's split")
    args = ap.parse_args(argv)
    committed: dict = {}
    if SPLIT.exists():
        with SPLIT.open("rb") as f:
            committed = tomllib.load(f)
    assignment = split(load_programs(), SEED, committed.get("program"))
    if args.check:
        doc = committed
        ok = doc.get("seed") == SEED and doc.get("program") == assignment
        print("split.toml matches" if ok else "split.toml is stale: rerun bench/corpus/split.py")
        return 0 if ok else 1
    SPLIT.write_text(render(assignment, SEED, datetime.date.today().isoformat()))
    counts = {h: sum(v == h for v in assignment.values()) for h in ("dev", "test")}
    print(f"wrote {SPLIT}: {counts['dev']} dev, {counts['test']} test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
