"""What gitmd cost a run (convergence issue, item 3), kept with the ended job (`gitmctl job`):

- ``window_s``: its capture windows' seconds, and ``capture_model_s`` what they cost it by gitmd's
  launch-cost model (capture/duty.py: kernels launched x capture.launch_cost_us; an upper bound that
  assumes the job is launch-bound) — a model, not a measurement;
- ``attached_model_s``: the same model for the rest of the run from its first window on, when CUPTI
  stays attached with its activity off (the shim's default: detaching crashed jobs): the seconds
  outside windows x the launch rate its windows saw x capture.attached_cost_us, until the end of
  its observation when capture.detach_cupti lets the shim detach then. Without it the model said
  2-6% for timm trainings whose observed runs cost 3-30% by their own clocks (H200 2026-12-04);
- ``losing_arms_s``: measured — each treatment window of a live trial that was not kept, its step
  against the trial's baseline steps: window seconds x (1 - baseline / treatment) when slower;
- ``trial_arm_s``: measured — a launch trial's treatment run against its command line's plain runs by
  the clock the trial timed it on (the clock library's or its launcher's when it went without the
  shim), when slower
  (null when there are no plain runs to compare with);
- ``observation_s``: measured — an observed run (one with windows) against the latest runs of its
  exact command line (the same arguments: the same work) with the same policy that had none and
  were no trial's (capture.reobserve_every makes
  them), when slower; 0 for a run with no window; null when fewer than OBSERVATION_BASE such runs
  exist. From CUDA's start to the exit where its baseline has that (``clock`` "cuda_s": the runs
  without a window went without the shim, with gitmd's clock library stamping their CUDA start,
  and the observed run's own length is the shim's on the same milestones); else by the launcher's
  clock (exec to exit, "wall_s"), the clock of runs without the shim whose stamps were not read;
  otherwise by the shim's own ("run_s": runs that kept the shim with no window). Where known it
  replaces the capture model and the losing arms (it holds them: it measures what the windows,
  the trials in them and the CUPTI they leave attached really cost; the model only counts launches
  inside windows);
- ``arm``: the launch trial arm the run was ("A", "B") or "";
- ``observation_cut``: why its observation ended before it had seen enough (its run's window budget
  spent: Observe.budget_spent), or null;
- ``measured_share``: the measured parts over the run's length, and ``share`` the model's part with
  them; each null when a part or the run's length is not known (never a guess). They are what
  gitmd's exploration (windows, trials) cost the run: what observing it less often saves
  (amortised_gap);
- ``launcher_s``: measured — the launcher's own seconds around the command, as it timed itself
  (`gitmctl run`: from its interpreter's start through its imports and the registration to the
  exec, and from the exit to its report; null: the launcher did not say, e.g. a scheduler's own);
  every run through the launcher pays it, observed or not. On a program of a few seconds it was
  the largest part (0.4-0.5 s per run on the H200 host, 2026-12-04);
- ``exit_ms``: measured — gitmd's time on the launcher's exit report before this record (the live
  trial ended, the launch trial's run recorded, the capture closed): the launcher waits for the
  report's answer before it exits with the job's status, so it is a part of the run's length as
  its scheduler sees it, outside ``launcher_s`` (null: no report, the reaper ended the job);
- ``total_share``: all of it, ``share`` with ``launcher_s`` over the command's exec-to-exit time
  (the length of the same command run plainly); null where ``share`` is.
- ``gitmd_cpu_s``: measured — the CPU seconds gitmd itself used (every daemon thread and its child
  processes: the analysis worker, multiprocessing's resource tracker) from the job's registration
  to this record, whichever job the work was for (a previous run's last window analysed while
  this one starts counts here: numba-cuda-montecarlo lost 29-33% in two runs, one of them without
  the shim and starting while the daemon still analysed the run before, H100 2026-12-07);
  ``host_busy``: how busy the host's CPUs were over the same span, all processes, 0-1;
  ``gitmd_host_share``: gitmd's part of the host's CPU capacity then.
  Neither is a cost of the run: they are the evidence for host-CPU contention (a DataLoader-bound
  job on a busy host) that the parts above cannot see. Null where /proc cannot be read.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any

from gitmd.loop.deps import Deps

KEPT = ("promoted",)
OBSERVATION_BASE = 3  # unobserved runs needed to measure what an observed one cost


def losing_arms_s(experiments: list[Any], window_s: float) -> float:
    """Seconds the treatment windows of trials that were not kept cost the run (measured)."""
    lost = 0.0
    for e in experiments:
        if e.state in KEPT or e.cause == "tune":  # a kept lever's windows were faster; tune: other runs
            continue
        mine = [a for a in e.arms if "from" not in a]  # carried from earlier runs: not this run's losses
        base = [float(a["step_ms"]) for a in mine if a.get("arm") == "A" and a.get("step_ms")]
        if not base:
            continue
        a_ms = statistics.median(base)
        for arm in mine:
            b_ms = float(arm.get("step_ms") or 0)
            if arm.get("arm") == "B" and b_ms > a_ms > 0:
                lost += window_s * (1 - a_ms / b_ms)
    return lost


ENDED = ("reverted", "abandoned", "failed")


def exploration_left(
    d: Deps, job_id: str, a_ms: list[float] | None = None, b_ms: list[float] | None = None
) -> str:
    """Why the run can afford no more live-trial treatment windows ("" : it can): its ended trials'
    losing arms, with the running trial's pairs so far (``a_ms``, ``b_ms``) and one more B window as
    costly as its worst, against experiments.run_cost_cap of the run's time so far. Each B arm costs
    the job for its window and the settle before it."""
    cfg = d.config.experiments
    if cfg.run_cost_cap <= 0:
        return ""
    arm_s = d.config.capture.window_duration_s + cfg.settle_s
    lost = losing_arms_s([e for e in d.experiments.of_job(job_id) if e.state in ENDED], arm_s)
    base = statistics.median(a_ms) if a_ms else 0.0
    these = [arm_s * (1 - base / y) for y in (b_ms or []) if base > 0 and y > base]
    lost += sum(these) + max(these, default=0.0)
    elapsed = (time.time_ns() - d.jobs.get(job_id).created_ns) / 1e9
    if lost <= cfg.run_cost_cap * elapsed:
        return ""
    return (
        f"this run's exploration budget is spent: its losing treatment windows cost {lost:.2f} s "
        f"of {elapsed:.0f} s so far, over experiments.run_cost_cap ({100 * cfg.run_cost_cap:.0f}%)"
    )


def observation_of(
    d: Deps, job: Any, policy_id: int, run_s: float | None, wall_s: float | None
) -> tuple[float | None, str]:
    """What an observed run cost against its command line's runs without a window, and the clock it was
    measured on (see the module's ``observation_s``); None when fewer than OBSERVATION_BASE such
    runs are known on either clock."""
    # CUDA's start to the exit first: the runs without a window had the clock library (no CUPTI) on
    # the shim's milestones, and that leaves out the interpreter's start and imports, where most of
    # two runs' difference lies; then the launcher's clock, then the shim's
    for clock, mine in (("cuda_s", run_s), ("wall_s", wall_s), ("run_s", run_s)):
        if not mine:
            continue
        base = d.jobs.unobserved_runs_s(
            job.launch_key, policy_id, {job.id}, clock=clock, command=(job.command, job.cwd)
        )
        if len(base) >= OBSERVATION_BASE:
            return max(0.0, mine - statistics.median(base)), clock
    return None, ""


def cpu_now(d: Deps) -> tuple[float | None, tuple[int, int] | None]:
    """gitmd's CPU seconds and the host's (busy, total) CPU ns now (Deps.own_cpu, Deps.host_cpu),
    each None where it cannot be read: never in the way of a registration or of the record."""
    try:
        own: float | None = float(d.own_cpu())
    except Exception:
        own = None
    try:
        host = d.host_cpu()
        host = (int(host[0]), int(host[1])) if host is not None else None
    except Exception:
        host = None
    return own, host


def cpu_used(d: Deps, start: tuple[float | None, tuple[int, int] | None] | None) -> dict[str, float | None]:
    """What gitmd and the host did with the CPUs since ``start`` (cpu_now at the job's
    registration; None for a job registered before this gitmd started): the module's
    ``gitmd_cpu_s``, ``host_busy`` and ``gitmd_host_share``, each null where not read."""
    out: dict[str, float | None] = {"gitmd_cpu_s": None, "host_busy": None, "gitmd_host_share": None}
    if start is None:
        return out
    own, host = cpu_now(d)
    used = None if own is None or start[0] is None else max(0.0, own - start[0])
    if used is not None:
        out["gitmd_cpu_s"] = round(used, 3)
    if start[1] is not None and host is not None:
        busy, total = host[0] - start[1][0], host[1] - start[1][1]
        if total > 0:
            out["host_busy"] = round(min(1.0, max(0.0, busy / total)), 4)
            if used is not None:
                out["gitmd_host_share"] = round(min(1.0, used * 1e9 / total), 4)
    return out


def attached_model_s(
    d: Deps, st: Any, run_s: float | None, now_ns: int | None = None, since_ns: int = 0
) -> float:
    """What CUPTI left attached between and after the run's windows cost it by the launch-cost
    model (see the module's ``attached_model_s``): 0 for a run that had no window. ``since_ns``:
    the job's registration, before which no window of it opened."""
    if not st.first_window_ns or st.window_s <= 0:
        return 0.0
    c = d.config.capture
    end = now_ns if now_ns is not None else time.time_ns()
    if c.detach_cupti and st.observation_end_ns:
        end = min(end, st.observation_end_ns)
    span = max(0.0, (end - max(st.first_window_ns, since_ns)) / 1e9)
    if run_s:
        span = min(span, run_s)  # never beyond the run's own length (a job the reaper ended late)
    outside = max(0.0, span - st.window_s)
    rate = st.window_kernels / st.window_s
    return outside * min(1.0, rate * c.attached_cost_us * 1e-6)


def run_cost(
    d: Deps,
    job_id: str,
    run_s: float | None,
    windows: int,
    wall_s: float | None = None,
    trial_id: int | None = None,
    launcher_s: float | None = None,
    exit_s: float | None = None,
) -> str:
    """The ending job's cost record (JSON), from what the loop holds of it and the store. ``run_s``:
    its length by the shim (None without one), ``wall_s`` by its launcher (None: not reported);
    ``trial_id``: the launch trial it was a run of (None: the state's, if it still holds one);
    ``launcher_s``: the launcher's own time around the command (None: not reported); ``exit_s``:
    gitmd's time on the exit report until now (None: no report, the reaper ended it)."""
    st = d.states.get(job_id)
    if st is None:
        return ""
    job = d.jobs.get(job_id)
    arms = losing_arms_s(d.experiments.of_job(job_id), d.config.capture.window_duration_s)
    trial_arm: float | None = 0.0
    arm = ""
    tid = trial_id if trial_id is not None else st.trial_id
    if tid is not None:
        trial = next((t for t in d.launch_trials.of_workload(job.workload_id) if t.id == tid), None)
        found = next((r.get("arm") for r in trial.runs if r.get("job_id") == job_id), "") if trial else ""
        arm = str(found or "")
        if arm == "B":
            # on the clock the trial timed it on: its launcher's when it went without the shim
            if st.shimless:  # its run_s is the clock library's where its launcher read the stamps
                clock, mine = ("cuda_s", run_s) if run_s else ("wall_s", wall_s)
            else:
                clock, mine = "run_s", run_s
            plain = d.jobs.plain_runs_s(job.launch_key, {job_id}, clock=clock, command=(job.command, job.cwd))
            trial_arm = max(0.0, mine - statistics.median(plain)) if plain and mine else None
    observation: float | None = 0.0
    clock = ""
    if windows:
        observation, clock = observation_of(d, job, st.policy_id, run_s, wall_s)
    # the observed run's whole excess, its live trials' losing arms in it, where it is known
    lost = arms if observation is None or not windows else observation
    # the run's length on the clock its excess was measured on (the shim's where it had one)
    length = wall_s if clock == "wall_s" else run_s or (wall_s if not windows else None)
    measured = None if trial_arm is None or not length else (lost + trial_arm) / length
    attached = attached_model_s(d, st, run_s, since_ns=job.created_ns)
    # measured where it can be
    model = st.window_model_s + attached if observation is None else 0.0
    share = None if measured is None or not length else measured + model / length
    total = None
    if share is not None:
        whole = wall_s or length  # the command's exec to exit: what the same command takes plainly
        total = share + (launcher_s / whole if launcher_s and whole else 0.0)
    doc: dict[str, Any] = {
        "windows": windows,
        "window_s": round(st.window_s, 3),
        "capture_model_s": round(st.window_model_s, 3),
        "attached_model_s": round(attached, 3),
        "losing_arms_s": round(arms, 3),
        "trial_arm_s": None if trial_arm is None else round(trial_arm, 3),
        "observation_s": None if observation is None else round(observation, 3),
        "arm": arm or "",
        "observation_cut": st.observation_note or None,
        "observation_clock": clock or None,
        "run_s": run_s,
        "wall_s": None if wall_s is None else round(wall_s, 3),
        "measured_share": None if measured is None else round(measured, 4),
        "share": None if share is None else round(share, 4),
        "launcher_s": None if launcher_s is None else round(launcher_s, 3),
        "exit_ms": None if exit_s is None else round(1000 * exit_s, 1),
        "total_share": None if total is None else round(total, 4),
        **cpu_used(d, st.cpu_at_start),
    }
    return json.dumps(doc, sort_keys=True)


def amortised_gap(d: Deps, job: Any) -> tuple[int, str]:
    """How many runs of its program must go unobserved between two observed ones for what an
    observed run costs it (the median share of its latest observed runs, run_cost above) to
    stay within capture.observation_budget over those runs; with why, for the log ((0, "") when
    no cost is known or no budget is set). Observing a launch-bound program costs it a
    share no window placement avoids (CUPTI stays attached after the first window: timm
    trainings lost 3-30% of an observed run, H200 2026-12-04): the backoff alone observed
    such a program on 6 of its first 32 runs, whatever that cost."""
    budget = d.config.capture.observation_budget
    if budget <= 0:
        return 0, ""
    shares = d.jobs.program_cost_shares(job)
    if not shares:
        return 0, ""
    share = statistics.median(shares)
    runs = math.ceil(share / budget - 1e-9) - 1
    if runs <= 0:
        return 0, ""
    return runs, (
        f"; an observed run costs it {100 * share:.1f}%, so {runs} runs go unobserved between two "
        f"to hold capture.observation_budget ({100 * budget:.1f}%)"
    )
