"""Launch levers across runs of a recurring job (its registration allows exploration).

When gitmd's attribution of a run finds a cause that a launch lever addresses, it plans a trial
for the run's workload. Every later registration of that workload (while the trial runs) gets an
arm in its launch plan: pairs of runs alternate their order (AB, BA, ...), B with the lever's
environment. A run's metric is its time per step from gitmd's own capture windows (the median over
its windows); its outputs for the contract are its exit status and the stdout metric values its
launcher reported at exit. Once ``rounds`` pairs are complete the trial is decided like any
experiment (paired bootstrap; the contract must hold in every pair); a promoted lever becomes a
validated policy of the workload, so the next launch gets it at once with no experiment.

Runs that show no steps (too short for a window, or failed early) spoil their pair; after
``MAX_SPOILED`` such runs the trial is abandoned.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from gitmd.experiments.decide import Decision, decide, early_stop
from gitmd.experiments.equivalence import Contract, Outputs, Verdict, evaluate
from gitmd.levers.base import Risk
from gitmd.levers.launch_env import EnvLever
from gitmd.levers.registry import make
from gitmd.store.db import Store

MAX_SPOILED = 6


@dataclass
class LaunchTrial:
    id: int
    workload_id: str
    lever: str
    setting: dict[str, Any]
    cause: str
    state: str
    runs: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)

    def lever_obj(self) -> EnvLever:
        lv = make(self.lever, **self.setting)
        assert isinstance(lv, EnvLever)
        return lv

    def next_arm(self) -> str:
        n = len(self.runs)
        first, second = ("A", "B") if (n // 2) % 2 == 0 else ("B", "A")
        return first if n % 2 == 0 else second

    def pairs(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Complete (A, B) pairs, in run order: both runs ended with a step time."""
        out = []
        for i in range(0, len(self.runs) - 1, 2):
            x, y = self.runs[i], self.runs[i + 1]
            if all(r.get("done") and r.get("step_ms") for r in (x, y)):
                out.append((x, y) if x["arm"] == "A" else (y, x))
        return out

    def spoiled(self) -> int:
        return sum(1 for r in self.runs if r.get("done") and not r.get("step_ms"))


def _trial(r: dict[str, Any]) -> LaunchTrial:
    return LaunchTrial(
        r["id"],
        r["workload_id"],
        r["lever"],
        json.loads(r["setting"]),
        r["cause"],
        r["state"],
        json.loads(r["runs"]),
        json.loads(r["decision"]),
    )


class LaunchTrials:
    def __init__(self, store: Store) -> None:
        self.store = store

    def _get(self, db: Any, tid: int) -> LaunchTrial:
        return _trial(next(iter(db.query("SELECT * FROM launch_trials WHERE id = ?", [tid]))))

    def of_workload(self, workload_id: str) -> list[LaunchTrial]:
        with self.store.reading() as db:
            return [
                _trial(r)
                for r in db.query(
                    "SELECT * FROM launch_trials WHERE workload_id = ? ORDER BY id", [workload_id]
                )
            ]

    def running(self, workload_id: str) -> LaunchTrial | None:
        return next((t for t in self.of_workload(workload_id) if t.state == "running"), None)

    def plan(self, workload_id: str, lever: EnvLever, cause: str) -> LaunchTrial | None:
        """A new trial, unless one runs for the workload or this lever was tried on it already."""
        now = time.time_ns()
        with self.store.transaction() as db:
            rows = list(
                db.query(
                    "SELECT id FROM launch_trials WHERE workload_id = ? AND (state = 'running' OR lever = ?)",
                    [workload_id, lever.name],
                )
            )
            if rows:
                return None
            cur = db.conn.execute(
                "INSERT INTO launch_trials (workload_id, lever, setting, cause, state, created_ns, "
                "updated_ns) VALUES (?, ?, ?, ?, 'running', ?, ?)",
                (workload_id, lever.name, json.dumps(lever.setting), cause, now, now),
            )
            return self._get(db, int(cur.lastrowid or 0))

    def assign(self, workload_id: str, job_id: str, uid: int) -> tuple[LaunchTrial, str] | None:
        """The running trial of the workload and this run's arm (recorded), or None."""
        with self.store.transaction() as db:
            rows = list(
                db.query(
                    "SELECT * FROM launch_trials WHERE workload_id = ? AND state = 'running'", [workload_id]
                )
            )
            if not rows:
                return None
            t = _trial(rows[0])
            arm = t.next_arm()
            t.runs.append({"job_id": job_id, "arm": arm, "uid": uid, "done": False})
            db.conn.execute(
                "UPDATE launch_trials SET runs = ?, updated_ns = ? WHERE id = ?",
                (json.dumps(t.runs), time.time_ns(), t.id),
            )
            return t, arm

    def finish_run(
        self,
        job_id: str,
        trial_id: int,
        step_ms: list[float],
        exit_code: int | None,
        metrics: dict[str, list[float]],
    ) -> LaunchTrial | None:
        """Record a run's end; the trial as it is now (None: not found or no longer running)."""
        with self.store.transaction() as db:
            rows = list(db.query("SELECT * FROM launch_trials WHERE id = ?", [trial_id]))
            if not rows:
                return None
            t = _trial(rows[0])
            if t.state != "running":
                return None
            for r in t.runs:
                if r["job_id"] == job_id:
                    r.update(
                        done=True,
                        step_ms=statistics.median(step_ms) if step_ms else None,
                        windows=len(step_ms),
                        window_ms=[round(x, 6) for x in step_ms],
                        exit_code=exit_code,
                        metrics=metrics,
                    )
            db.conn.execute(
                "UPDATE launch_trials SET runs = ?, updated_ns = ? WHERE id = ?",
                (json.dumps(t.runs), time.time_ns(), t.id),
            )
            return t

    def close_open_runs(self, why: str) -> int:
        """At start: runs a previous gitmd was measuring can no longer be measured; they end
        without a step time (their pairs are spoiled, the trial goes on with the next runs)."""
        n = 0
        with self.store.transaction() as db:
            for r in list(db.query("SELECT * FROM launch_trials WHERE state = 'running'")):
                t = _trial(r)
                open_runs = [x for x in t.runs if not x.get("done")]
                for x in open_runs:
                    x.update(done=True, step_ms=None, note=why)
                if open_runs:
                    n += len(open_runs)
                    db.conn.execute(
                        "UPDATE launch_trials SET runs = ?, updated_ns = ? WHERE id = ?",
                        (json.dumps(t.runs), time.time_ns(), t.id),
                    )
        return n

    def end(self, t: LaunchTrial, state: str, decision: dict[str, Any]) -> None:
        with self.store.transaction() as db:
            db.conn.execute(
                "UPDATE launch_trials SET state = ?, decision = ?, updated_ns = ? "
                "WHERE id = ? AND state = 'running'",
                (state, json.dumps(decision), time.time_ns(), t.id),
            )


def decide_trial(
    t: LaunchTrial, contract: Contract, rounds: int, min_gain: float, early_speedup: float = 0.0
) -> Decision | None:
    """The decision once ``rounds`` pairs are complete; None while more runs are needed. Before
    that, after each complete pair: outputs that changed end the trial at once (reverted), and a
    lever whose every B window was at least ``early_speedup`` times faster than every A window of
    every pair so far is promoted at once — a sequential design's early stop for an effect far
    beyond the between-run drift seen on the H200 (±30% at most, launch-bound processes): TF32 on
    fp32 GEMMs (1.7-4.9x) took six or more launches of 15-20 s to decide otherwise."""
    pairs = t.pairs()
    if not pairs:
        return None
    used = pairs[:rounds]
    verdict = _verdict(contract, used)
    risk = t.lever_obj().risk
    a_ms = [a["step_ms"] for a, _ in used]
    b_ms = [b["step_ms"] for _, b in used]
    if len(pairs) >= rounds:
        return decide(a_ms, b_ms, verdict, risk, min_gain, paired=True)
    if not verdict.ok or (risk is Risk.NUMERICS and not verdict.numbers_checked):
        return decide(a_ms, b_ms, verdict, risk, min_gain, paired=True)  # a rejection, whatever the pairs
    if early_speedup <= 0:
        return None
    worst = [
        min(a.get("window_ms") or [a["step_ms"]]) / max(b.get("window_ms") or [b["step_ms"]]) for a, b in used
    ]
    return early_stop(a_ms, b_ms, min(worst), early_speedup, rounds)


def _verdict(contract: Contract, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Verdict:
    failures: list[str] = []
    checked: set[str] = set()
    numbers = False
    for i, (a, b) in enumerate(pairs):
        v: Verdict = evaluate(contract, _outputs(a), _outputs(b))
        failures += [f"pair {i + 1}: {f}" for f in v.failures]
        checked |= set(v.checked)
        numbers = numbers or v.numbers_checked
    return Verdict(not failures, tuple(failures), tuple(sorted(checked)), numbers)


def _outputs(run: dict[str, Any]) -> Outputs:
    return Outputs(
        exit_status=run.get("exit_code"),
        metrics={k: tuple(v) for k, v in (run.get("metrics") or {}).items()},
    )
