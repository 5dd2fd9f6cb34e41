#!/usr/bin/env python3
"""A corpus summary, built from every raw corpus file under bench/results
(`corpus-<program>.json`, written by bench/corpus/scoreboard.py): per program its latest
measurement (with its runs, and the spread between its neighbouring plain runs: the noise its costs
are read against), and its oracle: every launch lever measured for it in any file (a raw file, an
oracle-only one of `--runs 0`, or the `oracle-<program>.json` a call killed mid-oracle left), each
lever's newest measurement, the best of them (`oracle_raw`: the files they came from). Nothing is
estimated: a figure no raw file holds is null. Programs of the manifest never measured are listed
with `measured_at` null.

    python3 bench/corpus/summary.py [--results bench/results] [--out FILE]

bench/results is append-only: with no --out it writes a new dated file, <results>/<date>-corpus-summary.json
(or <date>-corpus-summary-2.json and on, when that day has one), and an --out that exists already is
refused. `<results>/corpus-latest.json` is then a symbolic link to the file just written: the newest
summary by a fixed name, no file rewritten (a corpus-latest.json that is a file is left as it is and
said so; the first summary, 2026-12-03, was kept under that name until it became
2026-12-03-corpus-summary.json).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "bench" / "corpus"
FIELDS = ("oracle_speedup", "first_policy_run", "delivered_speedup", "worst_run_cost", "median_run_cost",
          "violations", "ratio_interval", "delivered_interval")  # fmt: skip


def _length(side: dict[str, Any]) -> float | None:
    """A run's length as the scoreboard compares it: the program's own clock, else its wall time."""
    x = side.get("clock") if side.get("clock") is not None else side.get("wall_s")
    return float(x) if x else None


def plain_spread(doc: dict[str, Any]) -> float | None:
    """The noise a run's cost is read against, from the same call: the largest difference between
    two plain runs that ran one after the other (the second of a BA pair and the first of the next
    AB pair), as a cost is written (1 - shorter / longer). Each gitmd run is judged by one plain
    run beside it: a cost below this is within what two plain runs differ by. None: no such
    neighbours (fewer than 3 runs)."""
    runs = doc.get("runs") or []
    diffs = []
    for x, y in itertools.pairwise(runs):
        if (x.get("order") or [""])[-1] == "plain" and (y.get("order") or [""])[0] == "plain":
            a, b = _length(x.get("plain") or {}), _length(y.get("plain") or {})
            if a and b:
                diffs.append(1 - min(a, b) / max(a, b))
    return round(max(diffs), 4) if diffs else None


def interval(ratios: list[float]) -> list[float] | None:
    """95% interval of the speedup over paired ratios: gitmd's own rule (Student's t on the pairs'
    log ratios, gitmd.experiments.decide); null below 2 pairs. The scoreboard's too."""
    if len(ratios) < 2:
        return None
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gitmd.experiments.decide import speedup_interval  # only here: the summary needs no gitmd else

    iv = speedup_interval(ratios, [1.0] * len(ratios), paired=True)
    return [round(iv.low, 4), round(iv.high, 4)]


def ratio_interval(doc: dict[str, Any]) -> list[float] | None:
    """The 95% interval of a file's paired run ratios (plain time over gitmd's); null below 2."""
    return interval([float(r["ratio"]) for r in doc.get("runs") or [] if r.get("ratio")])


def clock_quantum(doc: dict[str, Any]) -> float | None:
    """How coarse the program's clock was in this file's runs (bench/crash_soak.py::clock_quantum): the
    largest over its runs, as a share of the reading. A cost below it is the clock's rounding. None:
    the file predates the field, or the program has no clock of its own."""
    qs = [
        q
        for r in doc.get("runs") or []
        for side in ("plain", "gitmd")
        if (q := (r.get(side) or {}).get("clock_quantum")) is not None
    ]
    return max(qs) if qs else None


def commit_time(measured_at: dict[str, Any]) -> int:
    """When the gitmd commit a file measured was made (git's committer time; 0 when this clone does
    not know it): within one day, the order of measurements. Paths do not order them (two sessions'
    folders of one day sort by their names: "twentythird" after "twentyfourth")."""
    commit = str(measured_at.get("gitmd_commit") or "").split("+")[0]
    if not commit:
        return 0
    try:
        got = subprocess.run(
            ["git", "-C", str(ROOT), "show", "-s", "--format=%ct", commit],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return int(got.stdout.strip()) if got.returncode == 0 and got.stdout.strip().isdigit() else 0


def measured_lever(v: Any) -> bool:
    """An oracle lever measured: a pair with a ratio, or outputs that did not hold (a clock never
    read with outputs that held is no measurement), and not found not applicable (its knob changed
    nothing in the program). The oracle's best and the summary's merge both count these."""
    if not isinstance(v, dict) or v.get("not_applicable"):
        return False
    ratios = v.get("ratios") or []
    return any(x is not None for x in ratios) or (bool(ratios) and not v.get("outputs_held"))


def _oracle_levers(doc: dict[str, Any]) -> dict[str, Any]:
    """A file's oracle levers that were measured (measured_lever), by name."""
    levers = (doc.get("oracle") if "oracle" in doc else doc).get("levers") or {}
    return {n: v for n, v in levers.items() if measured_lever(v)}


def merged_oracle(measured: list[tuple[tuple[str, int, str], str, dict[str, Any]]]) -> dict[str, Any]:
    """One program's oracle from every file that measured part of it (``measured``: (when, raw file,
    levers)), as a call too short for a whole oracle measures it in parts: each lever's newest whole
    measurement (its pairs all run; a newer one the budget stopped counts only where no whole one
    exists), and the best of them whose outputs held: "plain" at 1.0 when none beat the program as
    it is or every one changed its outputs. ``raw``: the files those measurements came from."""
    newest: dict[str, tuple[tuple[bool, tuple[str, int, str]], str, dict[str, Any]]] = {}
    for when, raw, levers in measured:
        for name, v in levers.items():
            rank = (not v.get("stopped"), when)
            if name not in newest or rank > newest[name][0]:
                newest[name] = (rank, raw, v)
    if not newest:
        return {"speedup": None, "best": None, "raw": [], "on": None, "levers": []}
    held = {n: v for n, (_, _, v) in newest.items() if v.get("outputs_held") and v.get("speedup") is not None}
    best = max(held, key=lambda n: held[n]["speedup"], default=None)
    top = held[best]["speedup"] if best else None
    if top is None or top < 1:
        best, top = "plain", 1.0
    return {
        "speedup": top,
        "best": best,
        "raw": sorted({raw for _, raw, _ in newest.values()}),
        "on": max(rank[1][0] for rank, _, _ in newest.values()),
        "levers": sorted(newest),
    }


def build(results: Path, manifest: Path) -> list[dict[str, Any]]:
    programs = tomllib.loads(manifest.read_text())["program"]
    split = manifest.parent / "split.toml"
    halves = tomllib.loads(split.read_text()).get("program", {}) if split.exists() else {}
    latest: dict[str, tuple[tuple[str, int, str], dict[str, Any], str]] = {}
    # every oracle lever measured, per program: merged (merged_oracle), each lever's newest
    oracles: dict[str, list[tuple[tuple[str, int, str], str, dict[str, Any]]]] = {}
    files = sorted(results.rglob("corpus-*.json")) + sorted(results.rglob("oracle-*.json"))
    for f in files:
        if f.name == LATEST:
            continue
        try:
            doc = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            print(f"{f}: not read ({e}): left out", file=sys.stderr)
            continue
        partial = f.name.startswith("oracle-")  # written lever by lever while the oracle ran
        if not isinstance(doc, dict) or "program" not in doc or ("summary" not in doc and not partial):
            continue  # not a scoreboard file (bench/corpus/verify.py's corpus-verify.json)
        raw = str(f.relative_to(results.parent))
        if partial and f.with_name(f"corpus-{doc['program']}.json").exists():
            continue  # the call got as far as its raw file, which holds the same levers
        stamp = doc.get("measured_at") or {"date": _folder_date(f)}  # an early partial file had none
        when = (stamp.get("date") or "", commit_time(stamp), str(f))
        levers = _oracle_levers(doc)
        if levers:
            oracles.setdefault(doc["program"], []).append((when, raw, levers))
        if partial or not doc.get("runs"):
            continue  # an oracle alone: the program's runs are another file's
        if doc["program"] not in latest or when > latest[doc["program"]][0]:
            latest[doc["program"]] = (when, doc, raw)
    out = []
    for e in programs:
        name = e["name"]
        row: dict[str, Any] = {"name": name, "repo": e["repo"], "half": halves.get(name, "unsplit")}
        if name in latest:
            _, doc, raw = latest[name]
            row.update({k: doc["summary"].get(k) for k in FIELDS})
            if row["ratio_interval"] is None:  # a file from before the field: from its runs
                row["ratio_interval"] = ratio_interval(doc)
            row["measured_at"] = doc["measured_at"]
            row["raw"] = raw
            row["runs"] = len(doc.get("runs") or [])  # K asked (runs_asked); fewer when a budget ran out
            row["runs_asked"] = doc.get("runs_asked")
            row["plain_spread"] = plain_spread(doc)
            row["clock_quantum"] = clock_quantum(doc)
            # a GEMM- or copy-bound program's share of the peak measured in its call (ceiling.py)
            c = doc.get("ceiling")
            row["ceiling"] = (
                {k: c.get(k) for k in ("peak", "unit", "peak_value", "plain_fraction", "gitmd_fraction")}
                if isinstance(c, dict)
                else None
            )
        else:
            row["ceiling"] = None
            row.update({k: None for k in FIELDS})
            row["measured_at"] = None
            row["raw"] = None
            row["runs"] = row["runs_asked"] = row["plain_spread"] = row["clock_quantum"] = None
        # the oracle: every lever measured for it, each lever's newest (from the files it came from)
        orc = merged_oracle(oracles.get(name, []))
        row["oracle_speedup"] = orc["speedup"]
        row["oracle_best"] = orc["best"]
        row["oracle_levers"] = orc["levers"]
        row["oracle_raw"] = orc["raw"] or None
        row["oracle_measured_on"] = orc["on"]
        out.append(row)
    return out


def _folder_date(f: Path) -> str:
    """The date a results folder's name begins with (2026-12-05-...), "" when none."""
    for part in reversed(f.parts):
        if len(part) >= 10 and part[:4].isdigit() and part[4] == "-" and part[7] == "-":
            return part[:10]
    return ""


def dated(results: Path) -> Path:
    """The day's first free summary name under ``results``."""
    day = datetime.date.today().isoformat()
    out, n = results / f"{day}-corpus-summary.json", 2
    while out.exists():
        out, n = results / f"{day}-corpus-summary-{n}.json", n + 1
    return out


LATEST = "corpus-latest.json"


def point_latest(results: Path, written: Path) -> str:
    """``results``/corpus-latest.json made a symbolic link to ``written`` (a summary in the same
    folder); "" when done, else why not (a file of that name is a result: never replaced)."""
    latest = results / LATEST
    if written.parent.resolve() != results.resolve():
        return f"{LATEST} not pointed at {written}: not in {results}"
    if latest.exists() and not latest.is_symlink():
        return f"{latest} is a file, not a link: left as it is (results are append-only)"
    tmp = results / f".{LATEST}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(written.name)
    tmp.replace(latest)
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--manifest", type=Path, default=CORPUS / "manifest.toml")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.out is not None and a.out.exists():
        print(f"{a.out} exists: results are append-only, name a new file", file=sys.stderr)
        return 2
    rows = build(a.results, a.manifest)
    out = a.out or dated(a.results)
    out.write_text(json.dumps({"programs": rows}, indent=1) + "\n")
    measured = sum(1 for r in rows if r["measured_at"])
    print(f"wrote {out}: {len(rows)} programs, {measured} measured")
    if a.out is None:
        why = point_latest(a.results, out)
        print(why or f"{a.results / LATEST} -> {out.name}", file=sys.stderr if why else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
