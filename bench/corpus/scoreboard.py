#!/usr/bin/env python3
"""The corpus scoreboard (issue 26, item 3): per program, an oracle measured without gitmd, then
gitmd from an empty library for K recurring runs of the unmodified command through `gitmctl run`
with no flags, each beside a plain run (their order alternating), judged by the program's own clock.

    python3 bench/corpus/scoreboard.py --programs timm-resnet18-train-fp32,cupy-cg --runs 5 \\
        --out bench/results/2026-12-04-corpus-h200

Per program it writes `<out>/corpus-<program>.json` (the raw file: every run, its clock, its
outputs against the plain run beside it, what gitmctl said: trial arm, policy at launch), and
prints a table. `make corpus-summary` writes a new dated `bench/results/<date>-corpus-summary.json` from every
raw file. A figure that was not measured is null, never an estimate.

- **oracle**: each launch lever of gitmd's catalog (`ListLevers`, its default setting, the
  environment it produces) against plain runs, `--oracle-pairs` AB/BA pairs each; the best lever
  whose outputs held (bench/corpus/oracle.py). `--oracle-levers none` skips it; `a,b` names the
  levers, `a+b` a pair of them. No oracle pair starts that would end past `--budget-s` (at the last
  pair's length), and `<out>/oracle-<program>.json` is replaced after every pair, so a call killed
  mid-oracle keeps what it measured. An oracle too long for one call is measured in parts:
  `--runs 0 --oracle-levers a,b` in one call, `c,d` in the next, then the best two together as
  `a+c`; the summary merges them, each lever's newest.
- **runs**: run i is a pair, plain and gitmd, in alternating order; its ratio is plain time over
  gitmd time by the program's clock (its log line, or the run's wall time where its clock is
  "wall"), >1 faster. Its cost is how much slower it was (0 when faster). The first run whose
  launch got a validated policy is `first_policy_run`; the median ratio from then on is the
  delivered speedup.
- **warm-up**: one plain run of each program comes first and is not scored (`--no-warm-up`: none):
  it pays for the cold caches a call's first run of a program meets; the raw file keeps it.
- **--shared-library**: one gitmd for every program of the call instead of one each, their runs
  interleaved (run 1 of each program, then run 2 of each...). Each raw file then holds
  `shared_library`: the workloads each program's runs were given, and those it shares with another
  program. A shared workload is a false match, or one program's launch taken for another's (six of
  the corpus's programs are timm's benchmark.py with another --model).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.corpus.ceiling import ceiling  # noqa: E402
from bench.corpus.oracle import oracle, ratio, seconds  # noqa: E402
from bench.corpus.summary import interval  # noqa: E402
from bench.crash_soak import (  # noqa: E402
    CONFIG,
    CORPUS,
    PY,
    Program,
    corpus_programs,
    jobs_by_name,
    library,
    run_once,
)
from bench.harness import Gitmd  # noqa: E402
from gitmd.api.pb import pb  # noqa: E402
from gitmd.capture.context import tree_cpu_s  # noqa: E402
from gitmd.levers.describe import catalog  # noqa: E402

POLICY_NOTE = "launching with its validated policy"
# each job's newest window kept (gitmctl trace --raw's format) and archived per program
# (<out>/windows-<program>.tgz): captures of programs nobody here wrote, for measuring the fingerprint's
# recall and false matches on programs it was not tuned on (convergence issue, item 2)
KEEP_WINDOWS = "[capture]\nkeep_windows = 1\n"


COARSE_CLOCK = 0.01  # a clock printed coarser than this share of its reading is said to be so


def warm_up(p: Program, logs: Path, timeout_s: float) -> dict[str, Any]:
    """One plain run of the program before any that is measured, kept in the raw file but never
    scored: a call's first run of a program pays for cold caches (the files it imports, the GPU's
    first context). Every first plain run of a program on the H200 was its slowest, by 20-70% on
    its wall clock and by up to 27% on its own (timm-vit-small-train-bf16: 17.7 ms/step against
    13.3-16.4, 2026-12-05), and it stood beside gitmd's first run."""
    got = run_once(p, [], logs / f"{p.name}.log", timeout_s, "warm-up (not scored)")
    print(f"{p.name} warm-up: exit {got['exit']} wall {got['wall_s']} s clock {got['clock']}", flush=True)
    return {k: got[k] for k in ("exit", "wall_s", "clock")}


def gitmd_runs(
    p: Program, g: Gitmd, runs: int, logs: Path, timeout_s: float, deadline: float = float("inf")
) -> list[dict]:
    out: list[dict] = []
    for i in range(runs):
        if time.monotonic() > deadline:
            print(f"{p.name}: budget spent after {i} run(s)", flush=True)
            break
        out.append(one_run(p, g, i, logs, timeout_s))
    return out


USAGE = ("cpu_s", "nivcsw", "gitmd_cpu_s")


def usage_now(g: Gitmd) -> tuple[resource.struct_rusage, float | None]:
    """What the runs so far used (this harness's reaped children) and gitmd's CPU seconds now."""
    return resource.getrusage(resource.RUSAGE_CHILDREN), tree_cpu_s(g.proc.pid) if g.proc else None


def usage_since(before: tuple[resource.struct_rusage, float | None], g: Gitmd) -> dict[str, Any]:
    """One run's use of the host, measured beside it and alike for both arms: ``cpu_s`` the CPU
    seconds of its process tree (the program, the children it reaped, and for gitmd's arm
    `gitmctl run` itself), ``nivcsw`` its involuntary context switches (it was runnable and another
    process took its CPU), ``gitmd_cpu_s`` the CPU seconds gitmd (daemon and worker) used meanwhile,
    whichever arm ran. The harness runs one program at a time, so its reaped children are that run's.
    They say whether a run that lost did more CPU work, waited for CPUs, or ran beside a busy gitmd."""
    r0, g0 = before
    r1, g1 = usage_now(g)
    return {
        "cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
        "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
        "gitmd_cpu_s": None if g0 is None or g1 is None else round(max(0.0, g1 - g0), 3),
    }


def one_run(p: Program, g: Gitmd, i: int, logs: Path, timeout_s: float) -> dict[str, Any]:
    """Run i + 1 of the program: plain and through `gitmctl run` with no flags, in alternating order."""
    ctl = [PY, "-m", "gitmctl", "--socket", str(g.socket), "run", "--name", f"corpus-{p.name}", "--"]
    order = ("plain", "gitmd") if i % 2 == 0 else ("gitmd", "plain")
    got = {}
    for arm in order:
        before = usage_now(g)
        got[arm] = run_once(p, [] if arm == "plain" else ctl, logs / f"{p.name}.log", timeout_s)
        got[arm].update(usage_since(before, g))
    plain, mine = got["plain"], got["gitmd"]
    r = ratio(seconds(p, plain), seconds(p, mine))
    run = {
        "run": i + 1,
        "order": list(order),
        "plain": {k: plain[k] for k in ("exit", "wall_s", "clock", "clock_quantum", *USAGE)},
        "gitmd": {k: mine[k] for k in ("exit", "wall_s", "clock", "clock_quantum", "notes", *USAGE)},
        "ratio": r,
        "cost": None if r is None else round(max(0.0, 1 / r - 1), 4),
        "violation": mine["exit"] != plain["exit"] or mine["out"] != plain["out"],
        "policy_at_launch": any(POLICY_NOTE in n for n in mine["notes"]),
        "trial_arm": next((n for n in mine["notes"] if "launch trial" in n), ""),
    }
    use = " ".join(f"{k} {plain[k]}/{mine[k]}" for k in USAGE)
    print(f"{p.name} run {i + 1}: ratio {r} ({use}, plain/gitmd) notes {mine['notes']}", flush=True)
    quanta = (plain["clock_quantum"], mine["clock_quantum"])
    coarse = max((q for q in quanta if q is not None), default=0.0)
    if coarse > COARSE_CLOCK:
        print(f"{p.name} run {i + 1}: its clock is printed to {100 * coarse:.1f}% of its reading: "
              "a cost below that is its rounding", flush=True)  # fmt: skip
    return run


def job_record(j: Any) -> dict[str, Any]:
    """What gitmd itself recorded of one run's job: its windows, where the loop left it, the policy it
    launched with, its run by its own clock and what gitmd says it cost the run."""
    try:
        cost = json.loads(j.cost_json) if j.cost_json else None
    except json.JSONDecodeError:
        cost = {"unparsed": j.cost_json[:500]}
    return {
        "id": j.id,
        "windows": j.windows,
        "phase": j.phase,
        "workload_id": j.workload_id,
        "policy_id": j.policy_id,
        "run_s": round(j.run_s, 3),
        "wall_s": round(j.wall_s, 3),  # its launcher's clock (the length of a run without the shim)
        "exit_code": j.exit_code if j.HasField("exit_code") else None,
        "processes": len(j.processes),
        "cost": cost,
    }


def experiments(g: Gitmd, job_id: str) -> list[dict[str, Any]]:
    """The live trials gitmd ran on the job: lever, setting, state, pairs (carried ones included),
    the arms' step times in order, and its decision."""
    resp = g.stub().GetExperiment(pb.GetExperimentRequest(job_id=job_id), timeout=30)
    return [
        {
            "id": e.id,
            "lever": e.lever,
            "setting": e.setting_json,
            "cause": e.cause,
            "state": e.state,
            "pairs": e.pairs,
            "arms": [[a.arm, a.step_ms if a.HasField("step_ms") else None] for a in e.arms],
            "speedup": e.speedup if e.HasField("speedup") else None,
            "reason": e.reason,
        }
        for e in resp.experiments
    ]


def attach_jobs(p: Program, g: Gitmd, runs: list[dict]) -> None:
    """Each run's gitmd record, joined by order of registration (the scoreboard's runs are sequential:
    the i-th job named corpus-<program> is run i's). A run whose gitmctl never registered leaves the
    join unsure: then no run gets a record, and `jobs_note` says why."""
    try:
        jobs = jobs_by_name(g).get(f"corpus-{p.name}", [])
    except Exception as e:  # the record is extra evidence; its absence is written down
        for r in runs:
            r["job"], r["jobs_note"] = None, f"ListJobs failed: {e}"
        return
    if len(jobs) != len(runs):
        for r in runs:
            r["job"], r["jobs_note"] = None, f"{len(jobs)} jobs for {len(runs)} runs: not joined"
        return
    for r, j in zip(runs, jobs, strict=True):
        r["job"] = job_record(j)
        try:
            r["job"]["experiments"] = experiments(g, j.id)
        except Exception as e:  # extra evidence, as above
            r["job"]["experiments"] = f"GetExperiment failed: {e}"


def gpu_peaks(names: list[str], timeout_s: float) -> dict[str, Any]:
    """The GPU's peaks the call's GEMM- and copy-bound programs are held to, measured now by
    bench/corpus/ceiling.py in a process of its own ({} when no program needs one; {"error": ...}
    when they could not be measured: the programs' fractions are then null)."""
    if not names:
        return {}
    cmd = [sys.executable, str(Path(__file__).with_name("ceiling.py")), "--peaks", ",".join(names)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout)[-2000:]}
        peaks: dict[str, Any] = json.loads(r.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as e:
        return {"error": str(e)[:2000]}
    print(f"peaks: {json.dumps(peaks)}", flush=True)
    return peaks


def archive_windows(g: Gitmd, to: Path, job_ids: set[str] | None = None) -> bool:
    """The windows gitmd kept of the program's jobs (<state>/windows/<job id>/<window id>.npz; the
    raw file's runs name their job ids), as one archive: all of them, or those of ``job_ids`` (one
    program's, of a library several shared). False: none was kept."""
    kept = g.db.parent / "windows"
    dirs = (
        [d for d in sorted(kept.iterdir()) if job_ids is None or d.name in job_ids] if kept.is_dir() else []
    )
    if not any(any(d.rglob("*.npz")) for d in dirs):
        return False
    with tarfile.open(to, "w:gz") as tar:
        for d in dirs:
            tar.add(d, arcname=f"windows/{d.name}")
    return True


def shared_workloads(runs_of: dict[str, list[dict]]) -> dict[str, Any]:
    """With one library for several programs: the workloads each program's runs were given, and
    those it shares with another program (a false match, or one program's launch taken for another)."""
    seen = {
        name: sorted({(r.get("job") or {}).get("workload_id") or "" for r in runs} - {""})
        for name, runs in runs_of.items()
    }
    return {
        "programs": sorted(runs_of),
        "workloads": seen,
        "shared_with": {
            name: {o: sorted(set(w) & set(seen[o])) for o in seen if o != name and set(w) & set(seen[o])}
            for name, w in seen.items()
        },
    }


def summarise(runs: list[dict]) -> dict[str, Any]:
    first = next((r["run"] for r in runs if r["policy_at_launch"]), None)
    after = [r["ratio"] for r in runs if first is not None and r["run"] >= first and r["ratio"] is not None]
    costs = [r["cost"] for r in runs if r["cost"] is not None]
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {
        "first_policy_run": first,
        "delivered_speedup": statistics.median(after) if after else None,
        # the K runs' paired ratios (plain time over gitmd's: above 1 faster) and their 95% interval
        # by gitmd's own rule: one that holds 1 says the runs under gitmd differed from plain ones by
        # no more than the pairs' noise; the delivered runs' interval likewise
        "ratio_interval": interval(ratios),
        "delivered_interval": interval(after),
        "worst_run_cost": max(costs) if costs else None,
        "median_run_cost": statistics.median(costs) if costs else None,
        "violations": sum(1 for r in runs if r["violation"]),
    }


def library_of(g: Gitmd) -> list[dict[str, Any]] | str:
    try:
        return library(g)  # policies and launch trials
    except Exception as e:  # extra evidence: its absence is written down
        return f"library failed: {e}"


def said(name: str, runs: list[dict]) -> None:
    for r in runs:
        j = r.get("job") or {}
        cost = j.get("cost") or {}
        what = f"windows {j.get('windows')} phase {j.get('phase')!r} policy {j.get('policy_id')}"
        cpu = f"gitmd cpu {cost.get('gitmd_cpu_s')} s host busy {cost.get('host_busy')}"
        got = f"run_s {j.get('run_s')} share {cost.get('share')} {cpu}"
        print(f"{name} run {r['run']}: gitmd recorded {what} {got}")


def shared(
    a: argparse.Namespace,
    names: list[str],
    known: dict[str, Program],
    levers: list[str] | None,
    logs: Path,
    base: Path,
    deadline: float,
    ctx: dict[str, Any],
) -> None:
    """--shared-library: one gitmd, from an empty library, for every program of the call, their runs
    interleaved (run 1 of each, then run 2 of each...), as one host runs several programs: whether a
    program's launch is taken for another's workload, and whether two programs' windows make one."""
    g = Gitmd(base / "shared", CONFIG.format(backend=a.backend) + KEEP_WINDOWS)
    g.start()
    runs_of: dict[str, list[dict]] = {n: [] for n in names}
    orcs: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            needs = set(ctx["meta"][name].get("needs", []))
            keep = a.out / f"oracle-{name}.json"
            orcs[name] = oracle(
                known[name], g, levers, a.oracle_pairs, logs, a.timeout_s, needs, deadline, keep, stamp()
            )
        for i in range(a.runs):
            for name in names:
                if time.monotonic() > deadline:
                    print(f"{name}: budget spent before run {i + 1}", flush=True)
                    continue
                runs_of[name].append(one_run(known[name], g, i, logs, a.timeout_s))
        for name in names:
            attach_jobs(known[name], g, runs_of[name])
            said(name, runs_of[name])
        learned = library_of(g)
    finally:
        g.stop()
        if g.log.exists():
            shutil.copy(g.log, logs / "shared-gitmd.log")
    together = shared_workloads(runs_of)
    print(f"one library for {len(names)} programs: {json.dumps(together['shared_with'])}", flush=True)
    for name in names:
        ids = {(r.get("job") or {}).get("id") or "" for r in runs_of[name]} - {""}
        archive_windows(g, a.out / f"windows-{name}.tgz", ids)
        write_program(name, known[name], orcs[name], runs_of[name], learned, ctx, together)


def write_program(
    name: str,
    p: Program,
    orc: dict[str, Any],
    runs: list[dict],
    learned: list[dict[str, Any]] | str,
    ctx: dict[str, Any],
    together: dict[str, Any] | None = None,
) -> None:
    """The program's raw file (<out>/corpus-<program>.json) and its row of the printed table; with
    no run (``--runs 0``, or the budget spent in its oracle) the file holds its oracle alone."""
    if not runs and not any(v.get("ratios") for v in orc.get("levers", {}).values()):
        return  # nothing ran: no raw file claims otherwise
    meta = ctx["meta"]
    s = summarise(runs)
    doc = {
        "program": name,
        "repo": meta[name]["repo"],
        "half": ctx["halves"].get(name, "unsplit"),
        "measured_at": stamp(),
        "argv": sys.argv,
        "clock": p.clock or "wall",
        "oracle": orc,
        "runs_asked": ctx["runs_asked"],
        "warm_up": ctx.get("warm_ups", {}).get(name),  # not scored: None when none ran
        "library": learned,
        "runs": runs,
        "summary": {**s, "oracle_speedup": orc.get("best_speedup")},
    }
    if together is not None:  # --shared-library: the library was every program's of the call
        doc["shared_library"] = together
    if "work" in meta[name] and runs:  # a GEMM- or copy-bound program: its share of the GPU's ceiling
        doc["ceiling"] = {
            **ceiling(
                meta[name]["work"],
                [r["plain"]["clock"] for r in runs],
                [r["gitmd"]["clock"] for r in runs],
                ctx["peaks"],
            ),
            "peaks": ctx["peaks"],
        }
    (ctx["out"] / f"corpus-{name}.json").write_text(json.dumps(doc, indent=1))
    best = f"{orc.get('best')} {orc.get('best_speedup')}" if orc["measured"] else "not measured"
    first = "none" if s["first_policy_run"] is None else str(s["first_policy_run"])
    cells = [name, doc["half"], best, first, s["delivered_speedup"], s["worst_run_cost"],
             s["median_run_cost"], s["violations"]]  # fmt: skip
    print("| " + " | ".join("not measured" if c is None else str(c) for c in cells) + " |", flush=True)


def stamp() -> dict[str, str]:
    """When a raw file was measured, and the gitmd commit it measured."""
    return {"date": datetime.date.today().isoformat(), "gitmd_commit": commit()}


def commit() -> str:
    """gitmd's commit as measured: GITMD_COMMIT when set (the GPU host's copy of the working tree
    keeps the session's first commit in its .git: 2026-12-04 it said 44512fe+uncommitted for three
    later commits), else what git says here."""
    if os.environ.get("GITMD_COMMIT"):
        return os.environ["GITMD_COMMIT"]
    git = ["git", "-C", str(ROOT), "describe", "--always", "--dirty=+uncommitted"]
    r = subprocess.run(git, capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", required=True, help="names in the manifest, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="recurring runs through gitmd (K)")
    ap.add_argument("--oracle-pairs", type=int, default=3)
    ap.add_argument("--oracle-levers", default="", help="'none', or levers a,b (default: every launch lever)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--manifest", type=Path, default=CORPUS / "manifest.toml")
    ap.add_argument("--src", type=Path, default=CORPUS / "src", help="the materialised sources")
    ap.add_argument("--backend", default="nvml")
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=float("inf"),
        help="start no run after this many seconds: what was measured is written, the rest is not run",
    )
    ap.add_argument("--no-warm-up", action="store_true", help="score the first run too (no warm-up run)")
    ap.add_argument(
        "--shared-library",
        action="store_true",
        help="one gitmd for every program of the call, their runs interleaved (default: one each)",
    )
    a = ap.parse_args(argv)
    deadline = time.monotonic() + a.budget_s
    known = corpus_programs(a.manifest, a.src)
    names = [n for n in a.programs.split(",") if n]
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown program(s) {bad}; known: {sorted(known)}")
    missing = [n for n in names if not known[n].cwd.exists()]
    if missing:
        ap.error(f"not materialised: {missing} (make corpus)")
    meta = {e["name"]: e for e in tomllib.loads(a.manifest.read_text())["program"]}
    split_file = a.manifest.parent / "split.toml"
    halves = tomllib.loads(split_file.read_text()).get("program", {}) if split_file.exists() else {}
    levers = [] if a.oracle_levers == "none" else [x for x in a.oracle_levers.split(",") if x] or None
    launch = {i.name for i in catalog() if i.launch and i.env}
    unknown = sorted({x for n in levers or [] for x in n.split("+") if x not in launch})
    if unknown:
        ap.error(f"--oracle-levers: not launch levers {unknown}; known: {sorted(launch)} (a pair: a+b)")
    a.out.mkdir(parents=True, exist_ok=True)
    peaks = gpu_peaks(sorted({meta[n]["work"]["peak"] for n in names if "work" in meta[n]}), a.timeout_s)
    logs = a.out / "logs"
    logs.mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="gitm-corpus-"))
    head = "program | half | oracle best | first policy run | delivered | worst cost | median cost"
    head += " | violations"
    print(f"| {head} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    ctx: dict[str, Any] = {"meta": meta, "halves": halves, "peaks": peaks, "out": a.out, "runs_asked": a.runs}
    ctx["warm_ups"] = warm = {}
    for name in [] if a.no_warm_up else names:
        if time.monotonic() < deadline:
            warm[name] = warm_up(known[name], logs, a.timeout_s)
    if a.shared_library:
        shared(a, names, known, levers, logs, base, deadline, ctx)
        return 0
    for name in names:
        if time.monotonic() > deadline:
            print(f"{name}: not run (budget spent)", flush=True)
            continue
        p = known[name]
        # an empty library per program
        g = Gitmd(base / name, CONFIG.format(backend=a.backend) + KEEP_WINDOWS)
        g.start()
        try:
            needs = set(meta[name].get("needs", []))
            keep = a.out / f"oracle-{name}.json"
            orc = oracle(p, g, levers, a.oracle_pairs, logs, a.timeout_s, needs, deadline, keep, stamp())
            runs = gitmd_runs(p, g, a.runs, logs, a.timeout_s, deadline)
            attach_jobs(p, g, runs)
            learned = library_of(g)
            said(name, runs)
        finally:
            g.stop()
            if g.log.exists():
                shutil.copy(g.log, logs / f"{name}-gitmd.log")
            archive_windows(g, a.out / f"windows-{name}.tgz")
        write_program(name, p, orc, runs, learned, ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
