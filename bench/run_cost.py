#!/usr/bin/env python3
"""What gitmd costs a short run, piece by piece: each program runs the same fixed work plainly and in
five ways that each add one piece of what `gitmctl run` brings, interleaved (the order turns every
round), against one real gitmd (NVML where a GPU is present). The difference of medians between
neighbours is that piece's cost:

  plain       the program alone
  guard       + the free guard on LD_PRELOAD (libgitm_guard.so)
  clock       gitmd's clock library injected alone (libgitm_clock.so, its stamp file named): what a
                run that gets no window carries in the shim's place, no daemon
  cupti       + CUPTI loaded by an injection library that enables nothing (bench/cupti_floor.c with
                its control file at 0): what loading CUPTI into the process costs
  shim        guard + gitmd's shim injected (ring created, callbacks registered, control thread),
              no daemon: windows never open
  ctl-nocap   `gitmctl run --no-capture`: gitmctl's start, registration, the exit report; no shim
  ctl-noexplore  `gitmctl run --no-explore`: shim and windows, no trial arms
  ctl         `gitmctl run` with its defaults: all of it (the daemon may open windows and trials)

Each gitmctl mode has its own launch key, so that each is its own recurring program to gitmd (its
observation backoff counts that mode's runs only).

    python3 bench/run_cost.py --programs cupy_fft,launch_bound --rounds 8 --json OUT.json

A corpus program is named `corpus:<name>` (bench/corpus/manifest.toml; materialised by `make corpus`):
its own command, folder and environment. Each run through gitmctl is joined with gitmd's record of
its job, so that runs with capture windows and runs the observation backoff left without any
(`ctl-observed`, `ctl-resting` in the table) are told apart.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.corpus.scoreboard import usage_now, usage_since  # noqa: E402
from bench.crash_soak import CONFIG, Program, corpus_programs  # noqa: E402
from bench.harness import Gitmd  # noqa: E402

PY = sys.executable
WL = ROOT / "bench" / "workloads"
SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
GUARD = ROOT / "shim" / "build" / "libgitm_guard.so"
FLOOR = ROOT / "shim" / "build" / "libcupti_floor.so"
CLOCK = ROOT / "shim" / "build" / "libgitm_clock.so"
# Fixed work each (not a duration), about a second or two of GPU work on the H200.
PROGRAMS = {
    "cupy_fft": [PY, str(WL / "cupy_fft.py"), "--steps", "300"],
    "launch_bound": [PY, str(WL / "launch_bound.py"), "--steps", "300"],
    "mlp_train": [PY, str(WL / "mlp_train.py"), "--steps", "100"],
    "trivial": [PY, "-c", "pass"],  # no CUDA: what the launch path costs where nothing is injected
}
MODES = ("plain", "guard", "clock", "cupti", "shim", "ctl-nocap", "ctl-noexplore", "ctl")


def backend() -> str:
    return "nvml" if shutil.which("nvidia-smi") else "sim"


# The program's own wall time inside gitmctl (its launcher's start and RPCs excluded), on stderr.
# Its start and end on the realtime clock: the launcher's time before the exec and after the exit apart.
CHILD = 's=$(date +%s%N); "$@"; r=$?; echo "gitm-child-ns $s $(date +%s%N)" >&2; exit $r'


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, int, str, int, int]:
    """Wall seconds, exit status, stderr, and the realtime ns at the start and the end."""
    t0, r0 = time.monotonic(), time.time_ns()
    p = subprocess.run(argv, capture_output=True, env=env, cwd=cwd)
    return time.monotonic() - t0, p.returncode, p.stderr.decode("utf-8", "replace"), r0, time.time_ns()


def child_span(stderr: str) -> tuple[int, int] | None:
    """The program's start and end (realtime ns) inside gitmctl, from CHILD's line on stderr."""
    found = re.findall(r"^gitm-child-ns (\d+) (\d+)$", stderr, re.M)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def launcher_start(n: int) -> dict[str, float]:
    """Median wall s of a bare interpreter, of one importing grpc and protobuf, and of one importing
    gitmctl's client (what `gitmctl run` imports before it can register): the launcher's floor."""
    out: dict[str, float] = {}
    if n <= 0:
        return out
    for label, code in (
        ("python -c pass", "pass"),
        ("import grpc, protobuf", "import grpc, google.protobuf.descriptor_pool"),
        ("import gitmctl.client", "import gitmctl.client"),
    ):
        got = []
        for _ in range(n):
            t0 = time.monotonic()
            subprocess.run([PY, "-c", code], check=True, cwd=ROOT)
            got.append(time.monotonic() - t0)
        out[label] = statistics.median(got)
    return out


def programs(names: list[str]) -> dict[str, Program]:
    """The named programs: ours (PROGRAMS) and corpus:<name> (the manifest's command, folder, env).
    Raises SystemExit naming what is unknown or not materialised."""
    corpus = corpus_programs() if any(n.startswith("corpus:") for n in names) else {}
    out: dict[str, Program] = {}
    bad = []
    for n in names:
        if n in PROGRAMS:
            out[n] = Program(n, PROGRAMS[n], ROOT)
        elif n.startswith("corpus:") and n[7:] in corpus:
            out[n] = corpus[n[7:]]
            if not out[n].cwd.exists():
                raise SystemExit(f"{n}: {out[n].cwd} is not materialised (make corpus)")
        else:
            bad.append(n)
    if bad:
        ours = ", ".join(PROGRAMS)
        raise SystemExit(f"unknown program(s): {', '.join(bad)} (ours: {ours}; or corpus:<name>)")
    return out


def command(
    mode: str, prog: Program, g: Gitmd, scratch: Path, i: int, debug: bool
) -> tuple[list[str], dict[str, str]]:
    program, name = prog.argv, prog.name.replace("corpus:", "")
    env = {**os.environ, **prog.env}
    if debug:
        env["GITM_SHIM_DEBUG"] = "1"  # the shim's own steps timed, on the job's stderr
    if mode == "guard":
        env["LD_PRELOAD"] = str(GUARD)
    elif mode == "clock":
        stamps = scratch / f"clock-{i}"
        stamps.write_text("")  # the library appends to it, never creates it
        env.update(CUDA_INJECTION64_PATH=str(CLOCK), GITMD_CLOCK_FILE=str(stamps))
    elif mode == "cupti":
        control = scratch / "floor-control"
        control.write_text("0")
        env.update(CUDA_INJECTION64_PATH=str(FLOOR), GITM_FLOOR_CONTROL=str(control))
    elif mode == "shim":
        job_dir = scratch / f"job-{i}"
        job_dir.mkdir(mode=0o700)
        env.update(LD_PRELOAD=str(GUARD), CUDA_INJECTION64_PATH=str(SHIM))
        env.update(GITM_JOB_DIR=str(job_dir), GITM_JOB_ID=f"j{i}")
    elif mode.startswith("ctl"):
        ctl = [PY, "-m", "gitmctl", "--socket", str(g.socket), "run", "-v", "--name", f"run-cost-{name}",
               "--launch-key", f"run-cost-{name}-{mode}"]  # fmt: skip
        if mode == "ctl-nocap":
            ctl.append("--no-capture")
        elif mode == "ctl-noexplore":
            ctl.append("--no-explore")
        return [*ctl, "--", "sh", "-c", CHILD, "sh", *program], env
    return program, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="cupy_fft,launch_bound")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", type=Path, help="every sample, the shim's debug lines, gitmd's jobs and log")
    ap.add_argument("--debug", action="store_true", help="GITM_SHIM_DEBUG=1: the shim's steps timed")
    ap.add_argument(
        "--backend",
        choices=("auto", "nvml", "sim"),
        default="auto",
        help="gitmd's telemetry (auto: NVML where a GPU is present); sim on a GPU host: what gitmd's NVML "
        "sampling costs a job, against an nvml run",
    )
    ap.add_argument(
        "--launcher-start",
        type=int,
        default=7,
        metavar="N",
        help="time the launcher's start apart, N times each (0: not): the interpreter alone, with grpc and "
        "protobuf imported, with gitmctl's client imported; what is left of `before` is its registration",
    )
    a = ap.parse_args()
    names = [p for p in a.programs.split(",") if p]
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"unknown mode(s): {', '.join(bad)} (modes: {', '.join(MODES)})")
    progs = programs(names)
    for need in (SHIM, GUARD, FLOOR, CLOCK):
        if not need.exists():
            raise SystemExit(f"{need} is not built (make -C shim all)")
    scratch = Path(tempfile.mkdtemp(prefix="gitm-runcost-"))
    telemetry = backend() if a.backend == "auto" else a.backend
    g = Gitmd(scratch / "gitmd", CONFIG.format(backend=telemetry))
    g.start()
    samples: dict[str, dict[str, list[float]]] = {p: {m: [] for m in modes} for p in names}
    failures: list[str] = []
    runs: list[dict[str, object]] = []
    i = 0
    try:
        for r in range(a.rounds):
            for p in names:
                turn = modes[r % len(modes) :] + modes[: r % len(modes)]
                for m in turn:
                    i += 1
                    argv, env = command(m, progs[p], g, scratch, i, a.debug)
                    before = usage_now(g)
                    s, rc, err, r0, r1 = timed(argv, env, progs[p].cwd)
                    span = child_span(err)
                    use = usage_since(before, g)  # the run's CPU and context switches, gitmd's CPU
                    shim = [ln for ln in err.splitlines() if ln.startswith(("gitm shim", "gitmctl"))]
                    job = re.search(r"^gitmctl run: job ([0-9a-f]+)", err, re.M)
                    inner = {
                        "child_s": (span[1] - span[0]) / 1e9 if span else None,
                        "before_s": (span[0] - r0) / 1e9 if span else None,
                        "after_s": (r1 - span[1]) / 1e9 if span else None,
                    }
                    runs.append({"program": p, "mode": m, "round": r, "wall_s": s, **inner, "exit": rc,
                                 "job": job.group(1) if job else "", "daemon_cpu_s": use["gitmd_cpu_s"],
                                 "cpu_s": use["cpu_s"], "nivcsw": use["nivcsw"],
                                 "stderr": shim[-40:]})  # fmt: skip
                    if rc != 0:
                        failures.append(f"{p} {m} round {r}: exit {rc}")
                        continue
                    samples[p][m].append(s)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
        jobs = subprocess.run(
            [PY, "-m", "gitmctl", "--socket", str(g.socket), "jobs", "--all", "--json"], capture_output=True
        ).stdout.decode()
    finally:
        g.stop()
    print(f"backend {telemetry}, {a.rounds} rounds, median wall s (added to plain)")
    print("| program | " + " | ".join(modes) + " |")
    print("| --- |" + " --- |" * len(modes))
    for p in names:
        med = {m: statistics.median(v) if v else float("nan") for m, v in samples[p].items()}
        base = med.get("plain", float("nan"))
        cells = [f"{med[m]:.3f} (+{med[m] - base:.3f})" if m != "plain" else f"{med[m]:.3f}" for m in modes]
        print(f"| {p} | " + " | ".join(cells) + " |")
    try:
        listed = json.loads(jobs) if jobs.strip() else {}
    except json.JSONDecodeError:
        listed = {"unparsed": jobs[-5000:]}
    windows = {j.get("id"): j.get("windows", 0) for j in listed.get("jobs", []) if isinstance(j, dict)}
    split = [(r, windows[r["job"]]) for r in runs if r["job"] in windows and r["exit"] == 0]
    if split:
        print("\nthrough gitmctl, by what gitmd did in the run: median wall s (added to plain), runs")
        for p in names:
            base = statistics.median(samples[p]["plain"]) if samples[p].get("plain") else float("nan")
            for m in modes:
                for kind, pick in (("observed", lambda w: w > 0), ("no window", lambda w: w == 0)):
                    got = [r["wall_s"] for r, w in split if r["program"] == p and r["mode"] == m and pick(w)]
                    if got:
                        med = statistics.median(got)
                        print(f"  {p} {m}, {kind}: {med:.3f} (+{med - base:.3f}), {len(got)} runs")
    inside = [r for r in runs if r["child_s"] is not None]
    if inside:
        print("\nthrough gitmctl: median s of the program itself (gitmctl's start and RPCs not in it),")
        print("and of gitmctl before the exec (its start, imports, registration) and after the exit")
        for p in names:
            plain = samples[p].get("plain") or []
            base = statistics.median(plain) if plain else float("nan")
            for m in modes:
                got = [r for r in inside if r["program"] == p and r["mode"] == m]
                if got:
                    c, b, e = (
                        statistics.median(float(r[k]) for r in got)
                        for k in ("child_s", "before_s", "after_s")
                    )
                    print(f"  {p} {m}: program {c:.3f} s (plain's whole wall {base:.3f}), "
                          f"before {b:.3f} s, after {e:.3f} s")  # fmt: skip
    print(
        "\ngitmd's own CPU seconds during each run (its threads and child processes; sampling, windows, "
        "analysis), median"
    )
    for p in names:
        cells = []
        for m in modes:
            mine = [r for r in runs if r["program"] == p and r["mode"] == m and r["exit"] == 0]
            got = [float(r["daemon_cpu_s"]) for r in mine if r["daemon_cpu_s"] is not None]
            cells.append(f"{m} {statistics.median(got):.3f}" if got else f"{m} -")
        print(f"  {p}: " + ", ".join(cells))
    print("\nthe run's own process tree (with gitmctl run where it ran), median CPU s / involuntary switches")
    for p in names:
        cells = []
        for m in modes:
            mine = [r for r in runs if r["program"] == p and r["mode"] == m and r["exit"] == 0]
            if not mine:
                cells.append(f"{m} -")
                continue
            cpu = statistics.median(float(r["cpu_s"]) for r in mine)
            cells.append(f"{m} {cpu:.3f} / {statistics.median(int(r['nivcsw']) for r in mine):.0f}")
        print(f"  {p}: " + ", ".join(cells))
    start = launcher_start(a.launcher_start)
    if start:
        before = [float(r["before_s"]) for r in inside if str(r["mode"]).startswith("ctl")]
        n = a.launcher_start
        print(f"\nthe launcher's start apart, median of {n} each (s; this host's python, no gitmd):")
        for k, v in start.items():
            print(f"  {k}: {v:.3f}")
        if before:
            b = statistics.median(before)
            print(f"  gitmctl before the exec, every ctl run: {b:.3f}; left for its registration and "
                  f"the launch plan: {b - start['import gitmctl.client']:.3f}")  # fmt: skip
    for f in failures:
        print("failed:", f)
    if a.json:
        doc = {"backend": telemetry, "samples": samples, "failures": failures, "runs": runs, "jobs": listed,
               "launcher_start": start}  # fmt: skip
        a.json.write_text(json.dumps(doc, indent=1))
        shutil.copy(g.log, a.json.with_suffix(".gitmd.log"))
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
