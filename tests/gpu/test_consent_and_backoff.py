"""On the H200: consent to a numerics-changing lever given once on the workload, and the observation
backoff (convergence issue, items 4 and 3).

- consent: an fp32 training launched with `gitmctl run` and no flags. Its first run ranks fp32 GEMMs,
  and TF32 is not tried (nothing compares its numbers); `gitmctl explain` on the ended run and
  `gitmctl library show` name TF32 with the command that allows it. After `gitmctl library contract
  WORKLOAD --metric ...`, the same command with no flags is held to the loss: the next run is
  observed (consent since its last observation), TF32's launch trial runs, and a later launch gets
  it as the workload's policy.
- backoff: a short launch-bound program launched 8 times with `gitmctl run --no-explore`: runs 1, 2,
  4 and 8 get capture windows, runs 3, 5, 6 and 7 none; run 8's cost record measures what being
  observed cost it against the runs that were not (observation_s)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.gpu.test_experiments import W, keep_log, out
from tests.gpu.test_launch_trials import CONFIG, gitmctl_lines  # CONFIG: settle_s = 0, windows at once
from tests.integration.conftest import Daemon, command, free_port

FP32 = [sys.executable, str(W / "mlp_train.py"), "--batch", "4096", "--hidden", "4096", "--steps", "1500"]


def ctl(d: Daemon, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), *args], capture_output=True, text=True, check=check,
        timeout=180,
    )  # fmt: skip


def job_of(stderr: str) -> str:
    return stderr.split("job ", 1)[1].split()[0]


@pytest.mark.timeout(560)
def test_tf32_is_tried_once_its_workload_has_the_users_consent(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    runs: list[dict[str, Any]] = []
    try:
        first = ctl(d, "run", "-v", "--", *FP32)
        assert first.returncode == 0, first.stderr[-2000:]
        job = json.loads(ctl(d, "job", job_of(first.stderr), "--json").stdout)
        wid = job["workload_id"]
        assert wid, job
        explained = ctl(d, "explain", job["id"]).stdout
        shown = ctl(d, "library", "show", wid).stdout
        out("consent-first-run.json", {"job": job, "explain": explained[-4000:], "show": shown[-4000:]})
        assert "consent: tf32_override" in shown and f"gitmctl library contract {wid}" in shown, shown
        assert f"gitmctl library contract {wid}" in explained, explained
        ctl(d, "library", "contract", wid, "--metric", r"loss=(\S+)", "--rtol", "1e-2")
        for i in range(9):
            r = ctl(d, "run", "-v", "--", *FP32)
            assert r.returncode == 0, r.stderr[-2000:]
            tail = gitmctl_lines(r.stderr)[-3:]
            job = json.loads(ctl(d, "job", job_of(r.stderr), "--json").stdout)
            runs.append({"run": i + 2, "stderr": tail, "result": r.stdout.split()[-3:], "job": job})
            if "launching with its validated policy" in r.stderr:
                break
        lib = json.loads(ctl(d, "library", "show", wid, "--json").stdout)
        out("consent-runs.json", {"runs": runs, "library": lib})
        (p,) = [p for p in lib.get("policies", []) if p["status"] == "validated"]
        assert p["env"] == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"} and p["ci_low"] >= 1.03, lib
        assert "launching with its validated policy" in " ".join(runs[-1]["stderr"]), runs
        # the trial's runs went without the shim (no CUPTI in either arm), timed from their CUDA start
        # by the clock library's stamps, which gitmctl run read
        trial = [x["job"] for x in runs if x["job"].get("phase") == "trial run"]
        assert trial and not any(j.get("capture") for j in trial), runs
        assert all(0 < j["run_s"] < j["wall_s"] for j in trial), runs
        assert json.loads(p["evidence_json"])["metric"].startswith("cuda_s"), p
    finally:
        keep_log(d, "gitmd-consent.log")


@pytest.mark.timeout(400)
def test_a_recurring_program_is_observed_on_runs_1_2_4_and_8(daemon_factory: Any) -> None:
    # the backoff alone: capture.observation_budget (fewer observed runs for a program whose observed
    # runs cost much, as this launch-bound loop's may) is off here; it is tested on the CPU
    # (tests/unit/loop/test_observe.py)
    config = CONFIG.format(port=free_port()) + "observation_budget = 0\n"
    d: Daemon = daemon_factory(config_text=config)
    program = [sys.executable, str(W / "launch_bound.py"), "--steps", "3000"]
    runs: list[dict[str, Any]] = []
    try:
        for i in range(8):
            r = ctl(d, "run", "-v", "--no-explore", "--", *program)
            assert r.returncode == 0, r.stderr[-2000:]
            job = json.loads(ctl(d, "job", job_of(r.stderr), "--json").stdout)
            cost = json.loads(job.get("cost_json") or "{}")
            runs.append({"run": i + 1, "windows": job.get("windows", 0), "run_s": job.get("run_s"),
                         "wall_s": job.get("wall_s"), "capture": job.get("capture", False),
                         "cost": cost, "result": r.stdout.split()[-3:]})  # fmt: skip
        out("backoff-runs.json", runs)
        observed = [x["run"] for x in runs if x["windows"]]
        assert observed == [1, 2, 4, 8], runs
        # the runs left unobserved went without the shim (CUPTI not loaded), timed from their CUDA
        # start by the clock library in its place
        assert [x["run"] for x in runs if not x["capture"]] == [3, 5, 6, 7], runs
        assert all(x["wall_s"] and x["wall_s"] > 0 for x in runs), runs
        assert all(0 < x["run_s"] < x["wall_s"] for x in runs if not x["capture"]), runs
        # run 8's observation measured against runs 3, 5, 6, 7 from CUDA's start to the exit
        assert runs[7]["cost"].get("observation_s") is not None, runs[7]
        assert runs[7]["cost"].get("observation_clock") == "cuda_s", runs[7]
    finally:
        keep_log(d, "gitmd-backoff.log")


BUDGET_CONFIG = """
[telemetry]
backend = "nvml"
[metrics]
port = {port}
[capture]
keep_windows = 4
observation_budget = 0
"""


@pytest.mark.timeout(420)
def test_a_short_launch_bound_programs_observed_runs_keep_to_their_window_budget(daemon_factory: Any) -> None:
    """Convergence issue, item 3: timm's trainings lived 6-7 s under CUDA and their observed runs' 3-4
    windows took most of that (ResNet-18 bf16's two observed runs 9.5% and 19% by its own clock, H200
    2026-12-04). With the run's window budget (capture.overhead_budget of its expected length, defaults
    otherwise), a recurring launch-bound program's later observed runs get the short first window alone,
    late in the run, and their observation ends there saying why. Each gitmd run is beside a plain run of
    the same program (interleaved); their step times are recorded, not asserted (one call's noise)."""
    d: Daemon = daemon_factory(config_text=BUDGET_CONFIG.format(port=free_port()))
    program = [sys.executable, str(W / "launch_bound.py"), "--seconds", "14"]

    def step_ms(stdout: str) -> float | None:
        found = [w for w in stdout.split() if w.startswith("step_ms=")]
        return float(found[-1].split("=")[1]) if found else None

    runs: list[dict[str, Any]] = []
    try:
        for i in range(4):
            plain = subprocess.run(program, capture_output=True, text=True, timeout=120)
            assert plain.returncode == 0, plain.stderr[-2000:]
            r = ctl(d, "run", "-v", "--no-explore", "--", *program, check=False)
            assert r.returncode == 0, r.stderr[-2000:]
            job = json.loads(ctl(d, "job", job_of(r.stderr), "--json").stdout)
            runs.append({"run": i + 1, "windows": job.get("windows", 0), "run_s": job.get("run_s"),
                         "cost": json.loads(job.get("cost_json") or "{}"), "id": job["id"],
                         "gitmd_step_ms": step_ms(r.stdout),
                         "plain_step_ms": step_ms(plain.stdout)})  # fmt: skip
        lines = d.log().splitlines()
        for x in runs:  # its cost record says so, and the log
            x["budget_spent"] = bool(x["cost"].get("observation_cut")) and any(
                x["id"] in ln and "window budget is spent" in ln for ln in lines
            )
        out("run-budget.json", runs)
        observed = [x for x in runs if x["windows"]]
        assert [x["run"] for x in observed] == [1, 2, 4], runs  # the backoff: run 3 rests
        # a first run's length is unknown: its observation is not bounded by it
        assert not runs[0]["budget_spent"], runs
        # runs 2 and 4: the first window alone, and their observation ended on the budget
        for x in observed[1:]:
            assert x["windows"] == 1 and x["budget_spent"], runs
    finally:
        keep_log(d, "gitmd-run-budget.log")
