"""The oracle: for each workload, every catalog setting relevant to it, applied without gitmd
(launch environment, CPU placement, nice, or the program's own switch for the same knob), in
interleaved baseline/treatment runs; the best median speedup whose outputs pass the contract.

python bench/oracle.py [--workloads a,b] [--repeats N] [--json FILE]
Prints a table; writes per-setting figures (medians, every run's step time, equivalence) as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.suite import CONTENDED_CPUS, TIME, Setting, W, Workload, by_name  # noqa: E402

PY = sys.executable


def hogs(w: Workload) -> subprocess.Popen[bytes] | None:
    """The contended workload's six busy processes on its cores, in a process group of their own
    (stop_hogs ends them all: killing the parent alone left its children spinning, H200 2026-12-03)."""
    if not w.contended:
        return None
    return subprocess.Popen(
        ["taskset", "-c", CONTENDED_CPUS, PY, str(W / "cpu_hog.py"), "--procs", "6", "--seconds", "3600"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )


def stop_hogs(p: subprocess.Popen[bytes] | None) -> None:
    if p is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def steps_args(w: Workload) -> list[str]:
    """Live workloads run for a fixed number of steps here (their --seconds is for gitmd's runs)."""
    args = list(w.args)
    if "--seconds" in args:
        i = args.index("--seconds")
        args[i : i + 2] = ["--steps", str(w.oracle_steps)]
    return args


def cotenant(
    w: Workload, s: Setting | None = None, gitmctl: list[str] | None = None
) -> subprocess.Popen[str] | None:
    """The workload's background co-tenant, started and warm ("ready"), with the setting's switch;
    under gitmd (``gitmctl``: the run command's prefix) as a background job."""
    if not w.cotenant:
        return None
    prog = [PY, str(W / w.cotenant[0]), *w.cotenant[1:], *(s.cotenant_argv if s else ())]
    cmd = [*gitmctl, "run", "--background", "--no-explore", "--", *prog] if gitmctl else prog
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        p.kill()
        raise SystemExit(f"the co-tenant of {w.name} did not start: {' '.join(cmd)}")
    return p


def stop(p: subprocess.Popen[str] | None) -> None:
    if p is not None and p.poll() is None:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_once(
    w: Workload, s: Setting | None, timeout: float = 300, args: list[str] | None = None
) -> dict[str, Any]:
    """One run of the workload with setting ``s`` (None: as it is); ``args``: its arguments when
    not the oracle's (the scoreboard's delivered runs, their length)."""
    co = cotenant(w, s)
    try:
        return _run_once(w, s, timeout, args)
    finally:
        stop(co)


def _run_once(
    w: Workload, s: Setting | None, timeout: float = 300, args: list[str] | None = None
) -> dict[str, Any]:
    cmd = [PY, str(W / w.script), *(steps_args(w) if args is None else args), *(s.argv if s else ())]
    if w.contended:
        cmd = ["taskset", "-c", (s.cpus if s and s.cpus else CONTENDED_CPUS), *cmd]
    if s and s.nice:
        cmd = ["nice", "-n", str(s.nice), *cmd]
    from gitmd.levers.launch_env import job_environment

    env = job_environment(os.environ, s.env if s else {})
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    out: dict[str, Any] = {"exit": r.returncode, "wall_s": time.monotonic() - t0}
    t = re.findall(TIME, r.stdout)
    m = re.findall(w.metric, r.stdout)
    out["step_ms"] = float(t[-1]) if t else None
    out["metric"] = float(m[-1]) if m else None
    steps = re.findall(r"steps=(\d+)", r.stdout)
    out["steps"] = int(steps[-1]) if steps else 0
    if r.returncode != 0:
        out["stderr"] = r.stderr[-2000:]
    return out


def same(w: Workload, a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["exit"] != b["exit"] or a["metric"] is None or b["metric"] is None:
        return False
    x, y = a["metric"], b["metric"]
    return abs(x - y) <= w.rtol * abs(x) + 1e-12


def search(w: Workload, repeats: int) -> dict[str, Any]:
    hog = hogs(w)
    try:
        results = []
        for s in w.settings:
            a_runs, b_runs, equal = [], [], True
            for r in range(repeats):
                for arm in ("A", "B") if r % 2 == 0 else ("B", "A"):
                    res = run_once(w, s if arm == "B" else None)
                    (b_runs if arm == "B" else a_runs).append(res)
                    print(
                        f"  {w.name} {s.lever} {arm}{r}: {res['step_ms']} ms ({res['wall_s']:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
                equal = equal and same(w, a_runs[-1], b_runs[-1])
            a = [x["step_ms"] for x in a_runs if x["step_ms"]]
            b = [x["step_ms"] for x in b_runs if x["step_ms"]]
            speedup = statistics.median(a) / statistics.median(b) if a and b else None
            results.append(
                {
                    "lever": s.lever,
                    "setting": s.setting,
                    "speedup": speedup,
                    "equivalent": equal,
                    "baseline_ms": statistics.median(a) if a else None,
                    "treatment_ms": statistics.median(b) if b else None,
                    "runs": {"A": a_runs, "B": b_runs},
                }
            )
        ok = [r for r in results if r["equivalent"] and r["speedup"]]
        best = max(ok, key=lambda r: r["speedup"], default=None)
        return {
            "workload": w.name,
            "headroom": w.headroom,
            "mode": w.mode,
            "settings": results,
            "oracle_speedup": max(1.0, best["speedup"]) if best else 1.0,
            "oracle_setting": (best["lever"] if best and best["speedup"] > 1.0 else "none"),
        }
    finally:
        stop_hogs(hog)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="", help="comma-separated names (default: all)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved pairs per setting (medians)")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    out = [search(w, a.repeats) for w in by_name([x for x in a.workloads.split(",") if x])]
    print("| workload | best setting | oracle speedup | every setting (speedup, equivalent) |")
    print("| --- | --- | --- | --- |")
    for o in out:
        each = ", ".join(
            f"{s['lever']} {s['speedup']:.3f}{'' if s['equivalent'] else ' (outputs differ)'}"
            if s["speedup"]
            else f"{s['lever']} failed"
            for s in o["settings"]
        )
        print(f"| {o['workload']} | {o['oracle_setting']} | {o['oracle_speedup']:.3f} | {each} |")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
