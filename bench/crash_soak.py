#!/usr/bin/env python3
"""Crash soak: many short runs of unmodified programs through `gitmctl run` with gitmd's defaults,
each program's output and exit status against its own plain run, from fresh libraries (so windows,
trials and their arms happen) — and what gitmd promoted against what the programs' own clocks show.

A round starts gitmd on a fresh state folder (every ``--fresh-every`` rounds; otherwise the library
of the round before is kept) and runs every program ``--runs`` times in a row through `gitmctl run`
(recurring, as a scheduler would), the programs side by side (``--parallel``), each after one plain
run of its own in the same round. It records per run: exit status (a signal death is a crash),
whether the output matched the plain run, the program's own step time, the job's capture windows
and CUPTI detaches, and per round the library's promotions with the speedup they claim.

    python3 bench/crash_soak.py --programs timm-resnet18-train-fp32,cupy-monte-carlo,threads4 \
        --rounds 6 --runs 4 --fresh-every 2 --budget-s 480 --json OUT.json

Programs: corpus entries (bench/corpus/manifest.toml, materialised under bench/corpus/src) by
name, and the in-house ``threads4`` (four host threads launching, tests/gpu/programs) and
``dataloader`` (a two-worker DataLoader, bench/workloads). ``--args NAME=ARGS`` replaces a
corpus program's arguments after its script (to shorten it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import Gitmd  # noqa: E402
from gitmd.api.pb import pb  # noqa: E402

PY = sys.executable
CORPUS = ROOT / "bench" / "corpus"
CONFIG = """
[telemetry]
backend = "{backend}"
[metrics]
port = 0
"""
RESULT = r"^result (.*)$"  # the in-house programs' result line; its step_ms= is timing, the rest output


@dataclass
class Program:
    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    output: str = ""  # regex over stdout: the numbers that must not change ("" : exit status only)
    clock: str = ""  # regex over its stream: the program's own time per step; "wall": the run's wall time
    clock_stream: str = "stdout"  # where the clock's lines go (timm's train.py logs to stderr)


def corpus_programs(manifest: Path | None = None, src: Path | None = None) -> dict[str, Program]:
    doc = tomllib.loads((manifest or CORPUS / "manifest.toml").read_text())
    out = {}
    for e in doc["program"]:
        owner, name = e["repo"].split("/")
        argv = [PY if a == "{python}" else a for a in e["command"]]
        out[e["name"]] = Program(
            e["name"],
            argv,
            (src or CORPUS / "src") / f"{owner}+{name}",
            # "$PYTHONPATH" and the like are the launcher's own (a prefix, not a replacement)
            {k: os.path.expandvars(str(v)) for k, v in e.get("env", {}).items()},
            "" if e.get("output", "exit") == "exit" else e["output"],
            e.get("step_clock", ""),
            e.get("step_clock_stream", "stdout"),
        )
    return out


def own_programs() -> dict[str, Program]:
    return {
        "threads4": Program(
            "threads4",
            [PY, str(ROOT / "tests/gpu/programs/threads_launch.py"), "20000", "4"],
            ROOT,
            output=RESULT,
        ),
        "dataloader": Program(
            "dataloader",
            [PY, str(ROOT / "bench/workloads/dataloader_input.py"), "--steps", "400"],
            ROOT,
            output=RESULT,
            clock=r"step_ms=([0-9.]+)",
        ),
    }


def outputs(p: Program, text: str) -> list[str]:
    if not p.output:
        return []
    found = re.findall(p.output, text, re.MULTILINE)
    return [re.sub(r" ?step_ms=\S+", "", f) for f in found]  # timing is no output


def clock(p: Program, text: str) -> float | None:
    """The program's own time per step from its log lines (median), None when it printed none (or
    its clock is the run's wall time, "wall"). A pattern with a group named `per_s` reads a rate (steps
    or samples a second, its reciprocal is the time): a rate printed with more digits than the time
    beside it, or a running average, is a finer clock than a time rounded to the millisecond."""
    readings, rate = _readings(p, text)
    xs = [1 / v if rate else v for t in readings if (v := float(t)) > 0 or not rate]
    return statistics.median(xs) if xs else None


def _readings(p: Program, text: str) -> tuple[list[str], bool]:
    """The clock's readings as printed, and whether they are rates (a `per_s` group)."""
    if not p.clock or p.clock == "wall":
        return [], False
    rx = re.compile(p.clock, re.MULTILINE)
    rate = "per_s" in rx.groupindex
    return [m.group("per_s" if rate else 1) for m in rx.finditer(text)], rate


def clock_quantum(p: Program, text: str) -> float | None:
    """How coarse the program's clock is, as a share of its reading: the last printed digit's step over
    the median reading (0.001 / 0.023 = 4.3% for a time printed to the millisecond). A cost or
    speedup smaller than this is the clock's rounding, not a measurement; the median of such readings
    moves by whole steps (the imagefolder programs' clocks moved 25-100% between two plain runs on
    the H200, 2026-12-04). None: no clock of its own, or no reading."""
    texts, _ = _readings(p, text)
    values = [float(t) for t in texts if float(t) > 0]
    if not values:
        return None
    steps = [10.0 ** -(len(t.split(".", 1)[1]) if "." in t else 0) for t in texts]
    return float(f"{max(steps) / statistics.median(values):.3g}")


def run_once(
    p: Program, argv_prefix: list[str], log: Path, timeout_s: float, label: str = ""
) -> dict[str, Any]:
    """One run of the program, its outputs and clock read; its log appended to ``log`` under a
    header naming it (``label``: what it ran with, e.g. an oracle's lever)."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            [*argv_prefix, *p.argv],
            cwd=p.cwd,
            env={**os.environ, **p.env, "PYTHONFAULTHANDLER": "1"},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, str(e.stdout or ""), f"timed out after {timeout_s} s"
    with open(log, "a") as f:
        head = f"=== {p.name} {label} {' '.join(map(shlex.quote, argv_prefix[-3:]))} exit {code}"
        f.write(f"{head}\n{out[-4000:]}\n{err[-4000:]}\n")
    return {
        "exit": code,
        "wall_s": round(time.monotonic() - t0, 2),
        "out": outputs(p, out),
        "clock": clock(p, err if p.clock_stream == "stderr" else out),
        "clock_quantum": clock_quantum(p, err if p.clock_stream == "stderr" else out),
        "stderr_tail": err[-1500:] if code else "",
        "notes": [x for x in err.splitlines() if x.startswith("gitmctl run: ")][:10],  # trial arm, policy
    }


def jobs_by_name(g: Gitmd) -> dict[str, list[Any]]:
    resp = g.stub().ListJobs(pb.ListJobsRequest(all=True), timeout=30)
    out: dict[str, list[Any]] = {}
    for j in sorted(resp.jobs, key=lambda j: j.created_unix_ns):
        out.setdefault(j.name, []).append(j)
    return out


def library(g: Gitmd) -> list[dict[str, Any]]:
    stub = g.stub()
    rows = []
    for w in stub.ListWorkloads(pb.ListWorkloadsRequest(), timeout=30).workloads:
        full = stub.GetWorkload(pb.GetWorkloadRequest(workload_id=w.id), timeout=30)
        for p in full.policies:
            rows.append({"workload": w.id, "name": w.name, "policy": p.id, "status": p.status,
                         "env": dict(p.env), "speedup": p.speedup if p.HasField("speedup") else None,
                         "ci": [p.ci_low, p.ci_high] if p.HasField("ci_low") else None,
                         "evidence": json.loads(p.evidence_json or "{}")})  # fmt: skip
        for t in full.launch_trials:
            rows.append({"workload": w.id, "name": w.name, "trial": t.id, "lever": t.lever, "state": t.state,
                         "reason": t.reason, "cause": t.cause, "cause_share": t.cause_share,
                         "speedup": t.speedup if t.HasField("speedup") else None,
                         "ci": [t.ci_low, t.ci_high] if t.HasField("ci_low") else None,
                         "runs": [{"job": r.job_id, "arm": r.arm, "crashed": r.crashed,
                                   "run_s": r.run_s if r.HasField("run_s") else None}
                                  for r in t.runs]})  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=4, help="runs through gitmctl run per program per round")
    ap.add_argument("--fresh-every", type=int, default=1, help="a fresh library every N rounds")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=0, help="start no round after this many seconds")
    ap.add_argument("--timeout-s", type=float, default=120)
    ap.add_argument("--backend", default="nvml")
    ap.add_argument("--args", action="append", default=[], help="NAME=ARGS: a program's arguments")
    ap.add_argument("--runs-of", action="append", default=[], help="NAME=N: that program's runs per round")
    ap.add_argument("--copies", type=int, default=1, help="each program in this many launchers side by side")
    ap.add_argument("--instances", type=int, default=1, help="rounds at once, each on its own gitmd")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--logs", type=Path, default=None)
    a = ap.parse_args()
    known = {**corpus_programs(), **own_programs()}
    names = [n for n in a.programs.split(",") if n]
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown program(s) {bad}; known: {sorted(known)}")
    progs = [known[n] for n in names]
    for spec in a.args:
        n, _, args = spec.partition("=")
        p = known[n]
        p.argv = [*p.argv[:2], *shlex.split(args)]
    runs_of = {n: int(v) for n, _, v in (x.partition("=") for x in a.runs_of)}
    missing = [p.name for p in progs if not p.cwd.exists()]
    if missing:
        ap.error(f"not materialised: {missing} (python3 bench/corpus/materialise.py)")
    logs = a.logs or a.json.parent / "soak-logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    t_start = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="gitm-soak-"))
    lock = threading.Lock()
    config = CONFIG.format(backend=a.backend)

    def save() -> None:
        with lock:
            a.json.write_text(json.dumps({"argv": sys.argv, "rows": rows, "rounds": rounds}, indent=1))

    def one_round(rnd: int, g: Gitmd, fresh: bool) -> None:
        before = {j.id for js in jobs_by_name(g).values() for j in js}
        ctl = [PY, "-m", "gitmctl", "--socket", str(g.socket), "run"]

        def one(p: Program, copy: int) -> None:
            plain = run_once(p, [], logs / f"{p.name}.log", a.timeout_s)
            with lock:
                rows.append({"round": rnd, "program": p.name, "copy": copy, "arm": "plain", "i": 0, **plain})
            for i in range(runs_of.get(p.name, a.runs)):
                name = f"soak-{p.name}-{copy}"  # the same launch key, so the same workload, for every copy
                r = run_once(p, [*ctl, "--name", name, "--"], logs / f"{p.name}.log", a.timeout_s)
                r["same_output"] = r["out"] == plain["out"]
                with lock:
                    rows.append(
                        {"round": rnd, "program": p.name, "copy": copy, "arm": "gitmd", "i": i + 1, **r}
                    )
                print(f"round {rnd} {p.name} run {i + 1}: exit {r['exit']} {r['wall_s']} s same "
                      f"{r['same_output']} clock {r['clock']}", flush=True)  # fmt: skip

        threads = [threading.Thread(target=one, args=(p, c)) for p in progs for c in range(a.copies)]
        for i in range(0, len(threads), a.parallel):
            batch = threads[i : i + a.parallel]
            for t in batch:
                t.start()
            for t in batch:
                t.join()
        by_name = {n: [j for j in js if j.id not in before] for n, js in jobs_by_name(g).items()}
        with lock:
            for r in rows:
                if r["round"] != rnd or r["arm"] != "gitmd":
                    continue
                js = by_name.get(f"soak-{r['program']}-{r['copy']}", [])
                if r["i"] - 1 < len(js):
                    j = js[r["i"] - 1]
                    r.update(job=j.id, windows=j.windows, detaches=sum(p.detaches for p in j.processes),
                             crash_note=j.crash, run_s=j.run_s, policy=j.policy_id)  # fmt: skip
            rounds.append({"round": rnd, "fresh": fresh, "library": library(g)})
        save()

    # --instances N: N rounds at once, each on its own gitmd and fresh library (more independent
    # learning episodes per call; the programs then share the GPU with the other instances' runs)
    if a.instances > 1:
        if a.fresh_every != 1:
            ap.error("--instances needs --fresh-every 1 (each instance learns from its own library)")
        for first in range(0, a.rounds, a.instances):
            if a.budget_s and time.monotonic() - t_start > a.budget_s:
                break
            group = range(first, min(first + a.instances, a.rounds))
            gs = {rnd: Gitmd(base / f"lib{rnd}", config) for rnd in group}
            for inst in gs.values():
                inst.start()
            ts = [threading.Thread(target=one_round, args=(rnd, inst, True)) for rnd, inst in gs.items()]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for inst in gs.values():
                inst.stop()
    else:
        g: Gitmd | None = None
        for rnd in range(a.rounds):
            if a.budget_s and time.monotonic() - t_start > a.budget_s:
                break
            fresh = rnd % a.fresh_every == 0
            if fresh or g is None:
                if g is not None:
                    g.stop()
                g = Gitmd(base / f"lib{rnd}", config)
            else:
                g.stop()
                g = Gitmd(g.prefix, config)  # restarted on the same library
            g.start()
            one_round(rnd, g, fresh)
        if g is not None:
            g.stop()
    rounds.sort(key=lambda r: r["round"])
    summary(rows, rounds)
    save()
    return 0


def died(code: int | None) -> bool:
    """Killed by a signal: negative from Python, 128 + N from `gitmctl run` (as a shell says it)."""
    return code is not None and (code < 0 or code > 128)


def summary(rows: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> None:
    head = "program | runs under gitmd | crashed (signal) | other exit != plain | output differs | windows"
    print(f"\n| {head} | detaches |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in sorted({r["program"] for r in rows}):
        rs = [r for r in rows if r["program"] == name and r["arm"] == "gitmd"]
        plain = {(r["round"], r["copy"]): r for r in rows if r["program"] == name and r["arm"] == "plain"}
        crashed = [r for r in rs if died(r["exit"])]
        other = [r for r in rs if r["exit"] != plain[(r["round"], r["copy"])]["exit"] and r not in crashed]
        differs = [r for r in rs if not r.get("same_output")]
        windows = sum(r.get("windows") or 0 for r in rs)
        detaches = sum(r.get("detaches") or 0 for r in rs)
        cells = [name, len(rs), len(crashed), len(other), len(differs), windows, detaches]
        print("| " + " | ".join(map(str, cells)) + " |")
    trials_and_calibration(rows, rounds)


def _ratio(base: list[float], other: list[float]) -> float | None:
    """How many times faster ``other`` is than ``base`` (both are times), medians; None if either is empty."""
    if not base or not other:
        return None
    return round(statistics.median(base) / statistics.median(other), 3)


def _fmt(x: Any) -> str:
    return "not measured" if x is None else str(x)


def trials_and_calibration(rows: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> None:
    """Every trial gitmd decided (or still ran) beside what the program's own clock says of the same
    runs, and every promoted policy's stored speedup beside what the program showed in the runs that
    got it afterwards (issue 31's calibration)."""
    by_job = {r["job"]: r for r in rows if r.get("job")}
    print("\n| round | workload | trial | state | share | bound | gitmd's speedup (run clock) | "
          "program's clock A/B | wall A/B | reason |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    trial_jobs: set[str] = set()
    for rd in rounds:
        for x in rd["library"]:
            if "trial" not in x:
                continue
            arms: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
            for run in x["runs"]:
                trial_jobs.add(run["job"])
                if run["job"] in by_job and run["arm"] in arms:
                    arms[run["arm"]].append(by_job[run["job"]])
            clock = _ratio(*[[r["clock"] for r in arms[k] if r.get("clock")] for k in "AB"])
            wall = _ratio(*[[r["wall_s"] for r in arms[k]] for k in "AB"])
            share = x["cause_share"]
            bound = round(1 / (1 - share), 3) if 0 < share < 1 else None
            print(f"| {rd['round']} | {x['name']} | {x['trial']} {x['lever']} | {x['state']} | {share:.2f} | "
                  f"{_fmt(bound)} | {_fmt(x['speedup'])} {x['ci'] or ''} | {_fmt(clock)} | {_fmt(wall)} | "
                  f"{x['reason'][:100]} |")  # fmt: skip
    print("\n| round | workload | policy | stored speedup [interval] | runs with it after | "
          "program's clock, plain / with | wall, plain / with | inside the interval |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    any_policy = False
    for rd in rounds:
        for x in rd["library"]:
            if "policy" not in x or x["status"] not in ("pinned", "validated"):
                continue
            any_policy = True
            rnd, key = rd["round"], x["name"]
            mine = [r for r in rows if r["round"] == rnd and f"soak-{r['program']}-{r['copy']}" == key]
            base = [r for r in mine if r["arm"] == "plain"]
            after = [r for r in mine if r.get("policy") == x["policy"] and r.get("job") not in trial_jobs]
            clock = _ratio(*[[r["clock"] for r in rs if r.get("clock")] for rs in (base, after)])
            wall = _ratio([r["wall_s"] for r in base], [r["wall_s"] for r in after])
            lo, hi = x["ci"] or (None, None)
            inside = None if clock is None or lo is None or hi is None else lo <= clock <= hi
            print(f"| {rd['round']} | {x['name']} | {x['policy']} {x['env']} | {x['speedup']} {x['ci']} | "
                  f"{len(after)} | {_fmt(clock)} | {_fmt(wall)} | {_fmt(inside)} |")  # fmt: skip
    if not any_policy:
        print("| - | - | nothing promoted | - | - | - | - | - |")


if __name__ == "__main__":
    sys.exit(main())
