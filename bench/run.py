"""The scoreboard: gitmd unattended on each workload of bench/suite.py (registration only, no
hints), against the oracle (bench/oracle.py), on a GPU host.

Per workload it reports: the baseline step time; what gitmd promoted and the speedup its experiment
estimated; what the promoted policy delivers, measured as the oracle measures (the program plain
against launched through gitmd with exploration off, interleaved); the oracle's speedup and
setting; their ratio (delivered over the oracle's); regressions promoted (a promoted setting the
oracle measured slower, or a policy that delivered a slowdown) and equivalence violations (a
promoted setting whose outputs the oracle saw change, or whose own outputs changed); the time
from the job's start to gitmd's decision; capture overhead (the program's own step time under a
gitmd at its default duty cycle, exploration off, against without gitmd, interleaved 30-second
runs, 3 pairs by default); and the recurring case (the launch after the
decision gets the policy in its plan, or applied to its processes for a live lever, and no new
trial of it).

  live     one `gitmctl run` of the job (seconds-long), its experiments polled until one is promoted
           (a reverted lever is followed by the cause's next) or the run's time is up
  launch   `gitmctl run` launches of the recurring job while gitmd runs launch trials (a reverted
           trial is followed by the next lever's), until a policy is validated, then one more
  control  one live run of CONTROL_S: nothing may be promoted; overhead must stay within 1%

python bench/run.py [--workloads a,b] [--oracle-repeats N] [--out bench/results] [--no-oracle]
Writes <out>/<date>-h200.md (and .json) with the command, GPU and driver. Each workload is a part
that fits a 10-minute device call; `make bench` runs them all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import oracle  # noqa: E402
from bench.harness import Gitmd  # noqa: E402
from bench.suite import CONTENDED_CPUS, TIME, Setting, Workload, by_name  # noqa: E402
from gitmd.api.pb import pb  # noqa: E402

PY = sys.executable
CONFIG = """
[telemetry]
backend = "{backend}"
[metrics]
port = 0
[capture]
window_every_s = 2
window_duration_s = 1.0
keep_windows = 16
"""
CONTROL_S = 60.0  # how long a control runs under gitmd
MAX_LAUNCHES = 16  # two launch trials of 6 runs, the runs that plan them, the recurring one


def gitmctl(g: Gitmd, *args: str) -> list[str]:
    return [PY, "-m", "gitmctl", "--socket", str(g.socket), *args]


def job_cmd(g: Gitmd, w: Workload, *extra: str, args: list[str] | None = None) -> list[str]:
    cmd = [
        *gitmctl(g, "run", *extra, "--metric", w.metric, "--rtol", str(w.rtol), "--"),
        PY,
        str(oracle.W / w.script),
        *(w.args if args is None else args),
    ]
    return ["taskset", "-c", CONTENDED_CPUS, *cmd] if w.contended else cmd


def step_ms(text: str) -> float | None:
    t = re.findall(TIME, text)
    return float(t[-1]) if t else None


def program_steps(text: str) -> int | None:
    """The steps a program's result line says it ran."""
    n = re.findall(r"\bsteps=(\d+)", text)
    return int(n[-1]) if n else None


def experiments(g: Gitmd, job_id: str) -> list[Any]:
    return list(g.stub().GetExperiment(pb.GetExperimentRequest(job_id=job_id), timeout=10).experiments)


def jobs(g: Gitmd) -> list[Any]:
    return list(g.stub().ListJobs(pb.ListJobsRequest(all=True), timeout=10).jobs)


def new_jobs(g: Gitmd, before: set[str]) -> list[str]:
    """The ids of the foreground jobs registered since ``before`` (a set of job ids)."""
    return [j.id for j in jobs(g) if j.id not in before and not j.background]


def interventions(g: Gitmd, job_id: str) -> list[Any]:
    return list(
        g.stub().ListInterventions(pb.ListInterventionsRequest(job_id=job_id), timeout=10).interventions
    )


def live(g: Gitmd, w: Workload) -> dict[str, Any]:
    co = oracle.cotenant(w, None, gitmctl(g))  # a background job under gitmd, if the workload has one
    try:
        return _live(g, w)
    finally:
        oracle.stop(co)


def _live(g: Gitmd, w: Workload) -> dict[str, Any]:
    before = {j.id for j in jobs(g) if not j.background}
    # a control runs long enough for gitmd to look and try (its suite arguments are the oracle's
    # short runs: 1.4 s of steps for cnn, over before a second window)
    args = timed_args(w, CONTROL_S) if w.mode == "control" else None
    proc = subprocess.Popen(
        job_cmd(g, w, args=args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    t0 = time.time()
    lines: list[str] = []
    ready: list[float] = []  # when the program said it is warmed up: its steady state from then

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not ready and line.strip() == "ready":
                ready.append(time.time())
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    job_id, decided = "", None
    deadline = time.monotonic() + w.live_seconds
    try:
        while time.monotonic() < deadline and proc.poll() is None and decided is None:
            new = new_jobs(g, before)
            if new:
                job_id = new[0]
                exps = experiments(g, job_id)
                done = [e for e in exps if e.state in ("promoted", "reverted", "failed")]
                # a reverted lever is followed by the cause's next one: only a promotion ends it early
                if any(e.state == "promoted" for e in done) and not [
                    e for e in exps if e.state in ("baseline", "treatment")
                ]:
                    decided = done
                    break
            time.sleep(1)
    finally:
        proc.terminate()  # also when the scoreboard is stopped
    proc.wait(timeout=60)
    reader.join(timeout=60)
    out = "".join(lines)
    if not job_id:  # it ended before the first look
        job_id = next(iter(new_jobs(g, before)), "")
    exps = experiments(g, job_id) if job_id else []
    promoted = [e for e in exps if e.state == "promoted"]
    recurring: dict[str, Any] = {}
    if promoted:
        recurring = again(g, w)
    first = min((e.updated_unix_ns for e in exps if e.state in ("promoted", "reverted")), default=0)
    base = [a.step_ms for e in exps for a in e.arms if a.arm == "A" and a.step_ms]
    return {
        "job_id": job_id,
        "experiments": [_exp(e) for e in exps],
        "promoted": [e.lever for e in promoted],
        "speedup": max((e.speedup for e in promoted), default=1.0),
        "decision_s": (first / 1e9 - t0) if first else None,
        # from the program's warm-up on (its own start-up — imports on contended cores took 29 s,
        # H200 2026-12-03 — is before its first CUDA call, where gitmd can see nothing)
        "steady_decision_s": (first / 1e9 - ready[0]) if first and ready else None,
        "baseline_ms": statistics.median(base) if base else None,
        "program_step_ms": step_ms(out),
        "program_steps": program_steps(out),
        **recurring,
    }


def again(g: Gitmd, w: Workload, seconds: float = 15.0, wait: float = 90.0) -> dict[str, Any]:
    """The recurring case of a live lever: the next launch gets the policy applied as soon as its
    processes show, with no experiment. Runs until the policy is in place (at most ``wait`` s: a
    torch job on two contended cores takes more than 25 s to reach CUDA, H200 2026-12-03), then
    ``seconds`` more, to see whether an experiment starts on it after all."""
    before = {j.id for j in jobs(g) if not j.background}
    proc = subprocess.Popen(job_cmd(g, w), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def applied() -> bool:
        new = new_jobs(g, before)
        return bool(new) and any("policy" in iv.reason for iv in interventions(g, new[0]))

    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc.poll() is None and not applied():
            time.sleep(1)
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            time.sleep(1)
    finally:
        proc.terminate()
    _, err = proc.communicate(timeout=60)
    new = new_jobs(g, before)
    ivs = interventions(g, new[0])
    exps = experiments(g, new[0])
    return {
        "recurring_got_policy": "launching with its validated policy" in err
        and any(iv.state == "promoted" and "policy" in iv.reason for iv in ivs),
        # an experiment ran on it after all: the recurring case has none (2026-12-03: contended's
        # recurring launch was explored for what remained of its cause, and this said "no trial")
        "recurring_trial": bool(exps),
        "recurring_notes": [x for x in err.splitlines() if "gitmctl run:" in x],
        "recurring_interventions": [(iv.lever, iv.state, iv.reason) for iv in ivs],
        "recurring_experiments": [(e.lever, e.state, e.reason) for e in exps],
    }


def launch(g: Gitmd, w: Workload) -> dict[str, Any]:
    runs = []
    t0 = time.time()
    decided_at = None
    last_trial_at: float | None = None
    for i in range(MAX_LAUNCHES):
        t_run = time.monotonic()
        known = {j.id for j in jobs(g)}
        r = subprocess.run(job_cmd(g, w), capture_output=True, text=True, timeout=500)
        wall = time.monotonic() - t_run
        note = [x for x in r.stderr.splitlines() if "gitmctl run:" in x]
        ms = step_ms(r.stdout)
        job_ids = new_jobs(g, known)
        runs.append(
            {
                "launch": i + 1,
                "job_id": job_ids[0] if job_ids else "",
                "exit": r.returncode,
                "step_ms": ms,
                "wall_s": wall,
                "notes": note,
            }
        )
        print(
            f"  {w.name} launch {i + 1}: {runs[-1]['step_ms']} ms ({wall:.1f} s); {' | '.join(note)}",
            file=sys.stderr,
            flush=True,
        )
        if decided_at is not None:
            break  # this was the launch after the decision: the recurring case
        wl = list(g.stub().ListWorkloads(pb.ListWorkloadsRequest(), timeout=10).workloads)
        if wl and any(p.status == "validated" for p in wl[0].policies):
            decided_at = time.time()  # one more launch: the recurring case
            continue
        trial_now = any("launch trial" in n for n in note)
        if trial_now:
            last_trial_at = time.time()
        # A reverted trial is followed by a run that plans the next lever (a cause seen in two
        # windows): two runs in a row without a trial, and none planned for the next launch (a run can
        # plan one just before it ends), mean gitmd plans nothing more.
        trials = g.stub().GetWorkload(pb.GetWorkloadRequest(workload_id=wl[0].id), timeout=10) if wl else None
        planned = trials is not None and any(t.state == "running" for t in trials.launch_trials)
        before = any("launch trial" in n for n in runs[-2]["notes"]) if i >= 1 else True
        if i >= 1 and not trial_now and not planned and not before:
            decided_at = last_trial_at
            break
    all_exps = [e for j in jobs(g) for e in experiments(g, j.id)]
    promoted = [e for e in all_exps if e.state == "promoted"]
    last = runs[-1]
    return {
        "runs": runs,
        "experiments": [_exp(e) for e in all_exps],
        "promoted": [e.lever for e in promoted],
        "speedup": max((e.speedup for e in promoted), default=1.0),
        "decision_s": (decided_at - t0) if decided_at else None,
        "baseline_ms": runs[0]["step_ms"],
        "recurring_got_policy": any("launching with its validated policy" in n for n in last["notes"]),
        # a launch trial's run, or a live experiment on it: the recurring case has neither
        "recurring_trial": any("launch trial" in n for n in last["notes"])
        or bool(last["job_id"] and experiments(g, last["job_id"])),
    }


def delivered(
    g: Gitmd,
    w: Workload,
    repeats: int = 3,
    seconds: float = 20.0,
    into: dict[str, Any] | None = None,
    best: Setting | None = None,
) -> dict[str, Any]:
    """What gitmd's promoted policy gives the program, measured the way the oracle measures a
    setting: the program's own step time, plain (A) and launched through gitmd with exploration
    off (B: the library's policy at launch, capture windows on, a co-tenant under gitmd as a
    background job), interleaved; outputs compared as the oracle does.
    gitmd's own figure (its experiment's estimate, from its windows) is not comparable with the
    oracle's: its windows slow the baseline arm it measures (pageable_input, 2026-12-02). The runs
    of a live lever are ``seconds`` long, so that its onset (its processes seen, a window to find
    its target: a second or two) weighs little, as on a real job; a launch policy is in place from
    the start, and its runs are the oracle's.
    ``best``: the oracle's best setting, run the oracle's way as a third arm (O) in the same
    rotation, the same steps: the oracle's speedup measured side by side with gitmd's (contended's
    oracle file and its delivered runs, from different calls, had their plain runs 10% apart)."""
    args = timed_args(w, seconds) if w.mode == "live" else oracle.steps_args(w)
    pin = ["taskset", "-c", CONTENDED_CPUS] if w.contended else []
    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": [], **({"O": []} if best is not None else {})}
    order = list(runs)
    if into is not None:
        into["delivered_runs"] = runs  # what is done so far, when the scoreboard is stopped
    for r in range(repeats):
        for arm in order[r % len(order) :] + order[: r % len(order)]:  # AB(O), B(O)A, (O)AB, ...
            if runs["A"] and runs["A"][0]["steps"] and "--seconds" in args:
                # every later run does the first one's steps: a loss after more steps is another
                # number (cotenant, 2026-12-02: 20-s runs under the policy ran more steps)
                args = counted_args(w, runs["A"][0]["steps"])
            if arm == "O":
                assert best is not None
                runs["O"].append(oracle.run_once(w, best, timeout=600, args=args))
                print(
                    f"  {w.name} delivered O{r}: {runs['O'][-1]['step_ms']} ms", file=sys.stderr, flush=True
                )
                continue
            prog = [PY, str(oracle.W / w.script), *args]
            under = arm == "B"
            cmd = [*pin, *gitmctl(g, "run", "--no-explore", "--"), *prog] if under else [*pin, *prog]
            co = oracle.cotenant(w, None, gitmctl(g) if under else None)
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            finally:
                oracle.stop(co)
            m = re.findall(w.metric, res.stdout)
            runs[arm].append(
                {
                    "exit": res.returncode,
                    "step_ms": step_ms(res.stdout),
                    "steps": program_steps(res.stdout) or 0,
                    "metric": float(m[-1]) if m else None,
                    "notes": [x for x in res.stderr.splitlines() if "gitmctl run:" in x],
                    # why a run failed (contended, 2026-12-03: one run under the policy exited 134
                    # and nothing said why)
                    **({"stderr": res.stderr[-3000:]} if res.returncode else {}),
                }
            )
            got = runs[arm][-1]["step_ms"]
            print(f"  {w.name} delivered {arm}{r}: {got} ms", file=sys.stderr, flush=True)
    return delivered_summary(w, runs)


def delivered_summary(w: Workload, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Speedup (medians), equivalence (each pair's outputs) and the policy at launch, from the runs
    done; a stopped scoreboard's last pair may be incomplete."""
    a = [x["step_ms"] for x in runs["A"] if x["step_ms"]]
    b = [x["step_ms"] for x in runs["B"] if x["step_ms"]]
    o = [x["step_ms"] for x in runs.get("O", []) if x["step_ms"]]
    side = {}
    if a and o:  # the oracle's setting, side by side with gitmd's policy
        side["oracle_side_speedup"] = statistics.median(a) / statistics.median(o)
        side["oracle_side_equivalent"] = all(
            oracle.same(w, x, y) for x, y in zip(runs["A"], runs["O"], strict=False)
        )
    return {
        **side,
        "delivered_speedup": statistics.median(a) / statistics.median(b) if a and b else None,
        "delivered_equivalent": all(oracle.same(w, x, y) for x, y in zip(runs["A"], runs["B"], strict=False)),
        "delivered_got_policy": all(
            any("launching with its validated policy" in n for n in x["notes"]) for x in runs["B"]
        ),
        "delivered_runs": runs,
    }


def _exp(e: Any) -> dict[str, Any]:
    return {
        "lever": e.lever,
        "state": e.state,
        "speedup": e.speedup if e.HasField("speedup") else None,
        "ci_low": e.ci_low if e.HasField("ci_low") else None,
        "reason": e.reason,
        "cause": e.cause,
    }


# Capture overhead is what a job pays at gitmd's defaults: its own gitmd with the default duty
# cycle (the scoreboard's gitmd opens windows every 2 s to decide fast), each run OVERHEAD_S long.
OVERHEAD_CONFIG = """
[telemetry]
backend = "{backend}"
[metrics]
port = 0
"""
OVERHEAD_S = 30.0


def _length_args(w: Workload, flag: str, value: str) -> list[str]:
    """The workload's arguments with its run length (--seconds or --steps) replaced by ``flag``."""
    args = list(w.args)
    for old in ("--seconds", "--steps"):
        if old in args:
            i = args.index(old)
            del args[i : i + 2]
    return [*args, flag, value]


def counted_args(w: Workload, steps: int) -> list[str]:
    """The workload's arguments for exactly ``steps`` steps (at least the warm-up's and one more)."""
    return _length_args(w, "--steps", str(max(5, steps)))


def timed_args(w: Workload, seconds: float) -> list[str]:
    return _length_args(w, "--seconds", str(seconds))


def overhead(
    w: Workload, backend: str, workdir: Path, repeats: int = 2, keep: dict[str, Any] | None = None
) -> float | None:
    """Program step time under gitmd (defaults, capture on, no exploration) over without,
    interleaved medians of OVERHEAD_S-second runs; ``keep`` gets every run's step time and the
    windows gitmd opened on each gitmd run."""
    g = Gitmd(workdir / f"{w.name}-overhead", OVERHEAD_CONFIG.format(backend=backend))
    g.start()
    a, b = [], []
    prog = [PY, str(oracle.W / w.script), *timed_args(w, OVERHEAD_S)]
    pin = ["taskset", "-c", CONTENDED_CPUS] if w.contended else []
    try:
        for r in range(repeats):
            for arm in ("plain", "gitmd") if r % 2 == 0 else ("gitmd", "plain"):
                if arm == "plain":
                    cmd = [*pin, *prog]
                else:
                    cmd = [*pin, *gitmctl(g, "run", "--no-explore", "--"), *prog]
                before = {j.id for j in jobs(g)} if arm == "gitmd" else set()
                co = oracle.cotenant(w)  # the same plain co-tenant in both arms
                try:
                    out = subprocess.run(
                        cmd, capture_output=True, text=True, timeout=OVERHEAD_S * 4 + 120
                    ).stdout
                finally:
                    oracle.stop(co)
                (a if arm == "plain" else b).append(step_ms(out))
                if arm == "gitmd" and keep is not None:
                    keep.setdefault("windows", []).extend(j.windows for j in jobs(g) if j.id not in before)
    finally:
        g.stop()
        if keep is not None:
            keep.update(plain_ms=a, gitmd_ms=b, log=str(g.log))
    a2, b2 = [x for x in a if x], [x for x in b if x]
    return statistics.median(b2) / statistics.median(a2) - 1 if a2 and b2 else None


def overhead_split(runs: dict[str, Any]) -> dict[str, float]:
    """The overhead of gitmd's first run of the workload (a first launch: its length unknown, its
    first window at start-up) and of its later, recurring runs (their first window waits for
    capture.settle_s), each against the median plain run."""
    a = [x for x in runs.get("plain_ms", []) if x]
    b = runs.get("gitmd_ms", [])
    if not a or not b:
        return {}
    base = statistics.median(a)
    out = {}
    if b[0]:
        out["overhead_first"] = b[0] / base - 1
    later = [x for x in b[1:] if x]
    if later:
        out["overhead_recurring"] = statistics.median(later) / base - 1
    # each interleaved pair's own ratio (its two runs back to back): the spread between processes
    # (the CuPy control's plain runs alone spread 10%, H200 2026-12-03) shows in the interval
    pairs = [y / x for x, y in zip(runs.get("plain_ms", []), b, strict=False) if x and y]
    if len(pairs) >= 2:
        from statsmodels.stats.weightstats import DescrStatsW

        logs = DescrStatsW(np.log(pairs))
        lo, hi = logs.tconfint_mean(alpha=0.05)
        out.update(
            overhead_paired=float(np.exp(logs.mean)) - 1,
            overhead_ci_low=float(np.exp(lo)) - 1,
            overhead_ci_high=float(np.exp(hi)) - 1,
        )
    return out


def score(w: Workload, got: dict[str, Any], orc: dict[str, Any] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": w.name, "mode": w.mode, "headroom": w.headroom, **got}
    if orc is not None:
        row["oracle_speedup"] = orc["oracle_speedup"]
        row["oracle_setting"] = orc["oracle_setting"]
        # gitmd's score is what its policy delivers, measured as the oracle measures (when run)
        mine = got.get("delivered_speedup") or got["speedup"]
        row["ratio"] = mine / orc["oracle_speedup"] if orc["oracle_speedup"] else None
        if got.get("delivered_speedup") and got.get("oracle_side_speedup"):
            # against the oracle's setting run in the same call, interleaved with gitmd's runs
            row["ratio_side"] = got["delivered_speedup"] / max(1.0, got["oracle_side_speedup"])
        measured = {s["lever"]: s for s in orc["settings"]}
        row["regressions"] = sum(
            1 for lv in got["promoted"] if lv in measured and (measured[lv]["speedup"] or 0) < 1.0
        )
        row["violations"] = sum(
            1 for lv in got["promoted"] if lv in measured and not measured[lv]["equivalent"]
        )
    if got.get("delivered_speedup") is not None:  # gitmd's own policy, measured: slower or changed
        row["regressions"] = row.get("regressions", 0) + int(got["delivered_speedup"] < 1.0)
        row["violations"] = row.get("violations", 0) + int(not got["delivered_equivalent"])
    return row


def report(rows: list[dict[str, Any]], argv: list[str], host: str) -> str:
    lines = [
        f"# gitmd's scoreboard on the GPU — {datetime.date.today()}",
        "",
        f"Command: `{shlex.join(argv)}`  ",
        f"GPU: {host}",
        "",
        "| workload | mode | headroom | baseline ms/step | promoted | gitmd's estimate | delivered "
        "| oracle (setting) | ratio | regressions | violations | decision s | overhead | recurring |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:

        def f(x: Any, fmt: str = "{:.3f}") -> str:
            return "-" if x is None else fmt.format(x)

        rec = "-"
        if "recurring_got_policy" in r:  # a lever was promoted: the next launch is the recurring case
            rec = (
                "policy at launch, no trial"
                if r.get("recurring_got_policy") and not r.get("recurring_trial")
                else "no"
            )
        name = f"{r['workload']} (partial: {r['partial']})" if r.get("partial") else r["workload"]
        ovh = f(r.get("overhead"), "{:+.1%}")
        if r.get("overhead_first") is not None and r.get("overhead_recurring") is not None:
            ovh += f" (first run {r['overhead_first']:+.1%}, recurring {r['overhead_recurring']:+.1%})"
        if r.get("overhead_paired") is not None:
            ovh += (
                f"; pairs {r['overhead_paired']:+.1%}"
                f" (95% {r['overhead_ci_low']:+.1%} .. {r['overhead_ci_high']:+.1%})"
            )
        ratio = f(r.get("ratio"))
        if r.get("ratio_side") is not None:
            side = r["oracle_side_speedup"]
            ratio += f" ({r['ratio_side']:.3f} against the oracle's setting in this call: {side:.3f}x)"
        decision = f(r.get("decision_s"), "{:.0f}")
        if r.get("steady_decision_s") is not None:
            decision += f" ({r['steady_decision_s']:.0f} from warm-up)"
        lines.append(
            f"| {name} | {r['mode']} | {r['headroom']} | {f(r.get('baseline_ms'))} | "
            f"{', '.join(r['promoted']) or 'nothing'} | {f(r['speedup'])} | "
            f"{f(r.get('delivered_speedup'))} | "
            f"{f(r.get('oracle_speedup'))} ({r.get('oracle_setting', '-')}) | {ratio} | "
            f"{r.get('regressions', '-')} | {r.get('violations', '-')} | "
            f"{decision} | "
            f"{ovh} | {rec} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="", help="comma-separated names (default: all); each is a part")
    p.add_argument("--oracle-repeats", type=int, default=3)
    p.add_argument("--no-oracle", action="store_true", help="gitmd's side only")
    p.add_argument(
        "--oracle-only",
        action="store_true",
        help="the oracle's side only, written to OUT/<workload>-oracle.json (a part too long for one call)",
    )
    p.add_argument(
        "--oracle-from",
        type=Path,
        metavar="DIR",
        help="take each workload's oracle from DIR/<workload>-oracle.json (an earlier --oracle-only)",
    )
    p.add_argument("--no-overhead", action="store_true", help="skip the capture overhead runs")
    p.add_argument(
        "--delivered-repeats",
        type=int,
        default=3,
        help="interleaved pairs measuring a promoted policy as the oracle measures (0: skip)",
    )
    p.add_argument("--delivered-seconds", type=float, default=20.0, help="length of each of those runs")
    p.add_argument(
        "--overhead-repeats",
        type=int,
        default=3,
        help="interleaved pairs of 30-s runs (H200: 2 were too few)",
    )
    p.add_argument("--backend", default="nvml")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    a = p.parse_args()
    host = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[0]
        if a.backend == "nvml"
        else a.backend
    )
    if sum((a.no_oracle, a.oracle_only, a.oracle_from is not None)) > 1:
        p.error("--no-oracle, --oracle-only and --oracle-from exclude one another")
    workloads = by_name([x for x in a.workloads.split(",") if x])
    if a.oracle_from is not None:
        missing = [w.name for w in workloads if not (a.oracle_from / f"{w.name}-oracle.json").is_file()]
        if missing:
            p.error(f"no oracle in {a.oracle_from} for {', '.join(missing)} (run --oracle-only first)")
    rows = []
    # a call's time limit (timeout sends SIGTERM): unwind, so that the daemon is stopped and its log
    # copied, and the rows done so far are written (fp32_mlp, 2026-12-03: its log was lost that way)
    signal.signal(signal.SIGTERM, _stop)
    # a program that dies of a fatal signal prints its Python stack (kept with a failed run)
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        _parts(a, workloads, rows)
    except Stopped:
        print(f"stopped by SIGTERM: {len(rows)} part(s) done", file=sys.stderr, flush=True)
        if rows:
            _write(a, rows, host)
        return 143
    if a.oracle_only:
        return 0
    _write(a, rows, host)
    return 0


class Stopped(BaseException):
    """SIGTERM: a BaseException, so that no `except Exception` on the way swallows it."""


def _stop(*_: object) -> None:
    raise Stopped


def _parts(a: argparse.Namespace, workloads: list[Workload], rows: list[dict[str, Any]]) -> None:
    for w in workloads:
        print(f"== {w.name} ({w.mode}): {w.headroom}", file=sys.stderr, flush=True)
        orc: dict[str, Any] | None = None
        if a.oracle_from is not None:
            orc = json.loads((a.oracle_from / f"{w.name}-oracle.json").read_text())
        elif not a.no_oracle:
            orc = oracle.search(w, a.oracle_repeats)
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / f"{w.name}-oracle.json").write_text(json.dumps(orc, indent=1, default=str))
        if a.oracle_only:
            assert orc is not None
            print(f"  {w.name}: oracle {orc['oracle_speedup']:.3f} ({orc['oracle_setting']})", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="gitm-bench-") as d:
            g = Gitmd(Path(d) / w.name, CONFIG.format(backend=a.backend))
            g.start()
            hog = oracle.hogs(w)
            got: dict[str, Any] = {}
            try:
                got.update(launch(g, w) if w.mode == "launch" else live(g, w))
                if got["promoted"] and a.delivered_repeats > 0:
                    best = next(
                        (s for s in w.settings if orc is not None and s.lever == orc["oracle_setting"]), None
                    )
                    got.update(delivered(g, w, a.delivered_repeats, a.delivered_seconds, into=got, best=best))
                runs: dict[str, Any] = {}
                got["overhead"] = (
                    overhead(w, a.backend, Path(d), repeats=a.overhead_repeats, keep=runs)
                    if not a.no_overhead
                    else None
                )
                got["overhead_runs"] = runs
                got.update(overhead_split(runs))
            except Stopped:
                rows.append(partial(w, got, orc))
                raise
            finally:
                oracle.stop_hogs(hog)
                g.stop()
                a.out.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(g.log, a.out / f"{w.name}-gitmd.log")
                kept = Path(d) / w.name / "lib" / "windows"
                if kept.is_dir():  # what gitmd saw: each job's newest windows (capture.keep_windows)
                    shutil.copytree(kept, a.out / f"{w.name}-windows", dirs_exist_ok=True)
                ovh_log = Path(d) / f"{w.name}-overhead.log"
                if ovh_log.exists():
                    shutil.copyfile(ovh_log, a.out / f"{w.name}-overhead-gitmd.log")
        rows.append(score(w, got, orc))
        if orc is not None:
            rows[-1]["oracle"] = orc


def partial(w: Workload, got: dict[str, Any], orc: dict[str, Any] | None) -> dict[str, Any]:
    """The row of a part stopped midway (a call's time limit): what was measured, marked partial.
    A run cut by the stop itself (its program got the signal too) is not the policy's doing."""
    if "promoted" not in got:  # stopped before gitmd decided
        return {
            "workload": w.name,
            "mode": w.mode,
            "headroom": w.headroom,
            "promoted": [],
            "speedup": None,
            "partial": "stopped before gitmd decided",
        }
    runs = got.get("delivered_runs")
    if runs is not None:
        cut = {
            k: [x for x in v if x["exit"] not in (-signal.SIGTERM, 128 + signal.SIGTERM)]
            for k, v in runs.items()
        }
        got.update(delivered_summary(w, cut))
    row = score(w, got, orc)
    row["partial"] = (
        "stopped during the delivered runs" if runs is not None else "stopped after gitmd decided"
    )
    if orc is not None:
        row["oracle"] = orc
    return row


def _write(a: argparse.Namespace, rows: list[dict[str, Any]], host: str) -> None:
    a.out.mkdir(parents=True, exist_ok=True)
    stem = (
        a.out / f"{datetime.date.today()}-h200"
        if a.backend == "nvml"
        else a.out / f"{datetime.date.today()}-{a.backend}"
    )
    md = report(rows, [Path(sys.argv[0]).as_posix(), *sys.argv[1:]], host)
    Path(f"{stem}.md").write_text(md)
    Path(f"{stem}.json").write_text(json.dumps(rows, indent=1, default=str))
    print(md)


if __name__ == "__main__":
    sys.exit(main())
