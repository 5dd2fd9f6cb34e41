"""bench/run.py's gitmd side against the real daemon (simulated GPUs, no CUDA here): a live run
and a recurring launch of a CPU program go through the same calls the scoreboard makes on the H200;
with nothing to attribute, nothing is promoted and the rows say so."""

from __future__ import annotations

from pathlib import Path

from bench import run as bench_run
from bench.harness import Gitmd
from bench.suite import Workload

PROG = """
import argparse, time
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=0.0)
a = p.parse_args()
steps = a.steps or (0 if a.seconds else 20)
t0 = time.monotonic()
n = 0
limit = min(a.seconds, 0.6)  # a scoreboard run's seconds, cut short: the test needs no long runs
while (n < steps) if steps else (time.monotonic() - t0 < limit):
    time.sleep(0.01)
    n += 1
# like a training loss: another number after another count of steps
print(f"result steps={n} step_ms={(time.monotonic() - t0) * 1e3 / n:.4f} loss={1 / n:.6f}", flush=True)
"""


def test_bench_run_live_and_launch_rows_on_a_cpu_program(short_tmp: Path) -> None:
    prog = short_tmp / "prog.py"
    prog.write_text(PROG)
    g = Gitmd(short_tmp / "g", bench_run.CONFIG.format(backend="sim"))
    g.start()
    try:
        w = Workload("cpu", str(prog), (), "none", "launch", r"loss=(\S+)", 1e-6, (), live_seconds=5)
        got = bench_run.launch(g, w)
        assert [r["exit"] for r in got["runs"]] == [0, 0]  # two launches, gitmd found nothing to try
        assert got["promoted"] == [] and got["speedup"] == 1.0 and got["baseline_ms"] > 0
        live = bench_run.live(
            g, Workload("cpu", str(prog), (), "none", "live", r"loss=(\S+)", 1e-6, (), live_seconds=3)
        )
        assert live["promoted"] == [] and live["job_id"]
        # a control runs for CONTROL_S under gitmd, whatever its suite arguments (the oracle's)
        ctl = bench_run.live(
            g, Workload("cpu", str(prog), ("--steps", "3"), "none", "control", r"loss=(\S+)", 1e-6, ())
        )
        assert ctl["promoted"] == [] and ctl["program_step_ms"] and ctl["job_id"]
        assert ctl["program_steps"] > 3  # timed (0.6 s of 10-ms steps here), not the suite's 3 steps
        co = short_tmp / "co.py"
        co.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
        w_co = Workload(
            "cpu", str(prog), (), "none", "live", r"loss=(\S+)", 1e-6, (), live_seconds=3, cotenant=(str(co),)
        )
        with_co = bench_run.live(g, w_co)
        background = [j for j in bench_run.jobs(g) if j.background]
        assert len(background) == 1 and with_co["job_id"] != background[0].id  # gitmd ran it as background
        # measured as the oracle measures: plain against through gitmd (no policy here: no change);
        # a timed run first, then every run does its steps (the loss depends on them)
        dv = bench_run.delivered(g, w_co, repeats=2, seconds=0.5)
        assert [len(dv["delivered_runs"][arm]) for arm in "AB"] == [2, 2]
        steps = {x["steps"] for arm in "AB" for x in dv["delivered_runs"][arm]}
        assert len(steps) == 1 and steps.pop() > 5, dv["delivered_runs"]
        assert dv["delivered_equivalent"] and not dv["delivered_got_policy"]
        assert 0.5 < dv["delivered_speedup"] < 2.0
        row = bench_run.score(w, {**live, "promoted": ["cpu_threads"], **dv}, None)
        assert row["regressions"] == int(dv["delivered_speedup"] < 1.0) and row["violations"] == 0
        over = bench_run.overhead(w, "sim", short_tmp, repeats=2)
        assert over is not None and over > -0.5
        row = bench_run.score(w, {**got, "overhead": over}, None)
        md = bench_run.report([row], ["bench/run.py"], "sim")
        assert "| cpu | launch | none |" in md and "nothing" in md
    finally:
        g.stop()


ORACLE_PROG = """
import os, time
fast = os.environ.get("OMP_NUM_THREADS") == "4"
wrong = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"
t = 0.002 if fast or wrong else 0.01
t0 = time.monotonic()
for _ in range(20):
    time.sleep(t)
print(f"result step_ms={(time.monotonic() - t0) * 50:.4f} loss={1.5 if wrong else 1.0}", flush=True)
"""


def test_the_oracle_takes_the_best_setting_whose_outputs_hold(short_tmp: Path) -> None:
    from bench import oracle
    from bench.suite import env_setting

    prog = short_tmp / "oracle_prog.py"
    prog.write_text(ORACLE_PROG)
    settings = (
        env_setting("cpu_threads"),
        env_setting("tf32_override"),
        env_setting("cuda_device_max_connections"),
    )
    w = Workload("cpu", str(prog), (), "threads", "launch", r"loss=(\S+)", 1e-6, settings)
    res = oracle.search(w, repeats=3)
    by = {s["lever"]: s for s in res["settings"]}
    assert by["cpu_threads"]["equivalent"] and by["cpu_threads"]["speedup"] > 2
    assert not by["tf32_override"]["equivalent"] and by["tf32_override"]["speedup"] > 2  # faster, wrong
    assert 0.7 < by["cuda_device_max_connections"]["speedup"] < 1.4
    assert res["oracle_setting"] == "cpu_threads" and res["oracle_speedup"] == by["cpu_threads"]["speedup"]


def test_a_part_split_in_two_calls_needs_its_oracle_first(short_tmp: Path) -> None:
    """--oracle-only writes OUT/<workload>-oracle.json; --oracle-from reads it back. Bad flags and a
    missing oracle are refused before anything runs."""
    import subprocess
    import sys

    run = Path(bench_run.__file__)
    base = [sys.executable, str(run), "--workloads", "cotenant", "--backend", "sim", "--out", str(short_tmp)]
    r = subprocess.run([*base, "--oracle-from", str(short_tmp)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no oracle in" in r.stderr and "cotenant" in r.stderr
    r = subprocess.run([*base, "--oracle-only", "--no-oracle"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exclude one another" in r.stderr
    r = subprocess.run([*base, "--workloads", "nope"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown workload" in r.stderr
    assert list(short_tmp.iterdir()) == []  # nothing ran, nothing written
