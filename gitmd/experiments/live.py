"""Live experiments: one live lever on one running job, decided by interleaved windows.

Rounds alternate their order (AB, BA, AB, …) so slow drift hits both arms alike; each round is a
pair for the decision (``decide``). The treatment is applied before its window (then given
``settle_s``) and reverted right after it, so the job spends as little time as possible under an
unproven change; every apply and revert goes through ``Interventions`` (recorded before it takes
effect, in the audit). Promotion applies the lever once more and marks it promoted; anything else
— a slower or unproven result, changed outputs, the job ending, gitmd stopping — leaves the job as
it was.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitmd.experiments.decide import MIN_GAIN, Decision, clearly_slower, decide, early_stop
from gitmd.experiments.equivalence import Verdict
from gitmd.experiments.interventions import Interventions
from gitmd.levers.base import Lever, LeverError, Risk, Target
from gitmd.store.db import Store

log = logging.getLogger(__name__)

RESTARTED = "gitmd restarted in the middle of it"  # an unfinished trial's reason after a restart
STATES = ("planned", "baseline", "treatment", "decided", "promoted", "reverted", "abandoned", "failed")


@dataclass(frozen=True)
class Measurement:
    window_id: int
    step_ms: float | None  # the job's median step time in the window (None: no step found)
    payloads: tuple[float, ...] = ()
    # the share of the span of the window's kernels (the stepping process's) during which one of
    # them ran (None: too few kernels to say)
    gpu_busy: float | None = None


# A host-only lever's measured speedup is checked against what is possible: the step cannot get
# shorter than the GPU's work in it, so at most 1 / (the baseline's GPU-busy share). A result whose
# interval's lower bound is above that by more than this is a measurement artifact, not a gain.
PLAUSIBLE_SLACK = 0.02


def _above(d: Decision, bound: float, why: str, verdict: str) -> Decision | None:
    """``d`` overturned when its promoted interval lies above ``bound`` (by more than the slack)."""
    if not d.promote or d.interval is None or d.interval.low <= bound * (1 + PLAUSIBLE_SLACK):
        return None
    iv = d.interval
    measured = f"{iv.speedup:.3f}x measured (95% {iv.low:.3f}-{iv.high:.3f})"
    return Decision(False, f"{measured} but {why} at most {bound:.3f}x; {verdict}", iv)


def implausible(lever: Lever, d: Decision, baseline_busy: list[float]) -> Decision | None:
    """The decision overturned when a host-only lever's promoted speedup exceeds what the GPU's
    own work in the baseline windows allows (a bf16 GEMM job queueing 50 steps ahead, H200
    2026-12-03: cpu_affinity measured 1.21x, 95% 1.07-1.35, delivered 1.001x)."""
    if not (lever.host_only and baseline_busy):
        return None
    busy = sorted(baseline_busy)[len(baseline_busy) // 2]
    why = f"the GPU was busy {busy:.1%} of the baseline windows: a change to the host threads can give"
    return _above(d, 1.0 / busy, why, "a measurement artifact, not promoted")


def beyond_cause(d: Decision, cause: str, share: float | None) -> Decision | None:
    """The decision overturned when the promoted speedup exceeds what removing its cause could give:
    the causes it addresses take at most ``share`` of the job's time (choose.reach), so at most
    1 / (1 - share). A gain above that is a measurement error, not a win (a launch trial stored 3.0x
    on a cause costing 17%, H200 2026-12-03)."""
    if share is None or not 0 < share < 1:
        return None
    why = (
        f"{cause} and the other causes its lever addresses take at most {share:.0%} of the job's time: "
        "removing all of it gives"
    )
    return _above(d, 1.0 / (1.0 - share), why, "implausible, a measurement error, not promoted")


@dataclass
class Experiment:
    id: int
    job_id: str
    lever: str
    setting: dict[str, Any]
    cause: str
    state: str
    arms: list[dict[str, Any]] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)
    created_ns: int = 0
    updated_ns: int = 0


class ExperimentStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, job_id: str, lever: Lever, cause: str) -> Experiment:
        now = time.time_ns()
        with self.store.transaction() as db:
            cur = db.conn.execute(
                "INSERT INTO experiments (job_id, lever, setting, cause, state, created_ns, updated_ns) "
                "VALUES (?, ?, ?, ?, 'planned', ?, ?)",
                (job_id, lever.name, json.dumps(lever.setting), cause, now, now),
            )
        return self.get(int(cur.lastrowid or 0))

    def record(
        self,
        job_id: str,
        lever: Lever,
        cause: str,
        state: str,
        arms: list[dict[str, Any]],
        decision: dict[str, Any],
    ) -> Experiment:
        """A finished experiment run elsewhere (`gitmctl tune`'s trials), kept as one row."""
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}")
        now = time.time_ns()
        with self.store.transaction() as db:
            cur = db.conn.execute(
                "INSERT INTO experiments (job_id, lever, setting, cause, state, arms, decision, created_ns, "
                "updated_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, lever.name, json.dumps(lever.setting), cause, state, json.dumps(arms),
                 json.dumps(decision), now, now),
            )  # fmt: skip
        return self.get(int(cur.lastrowid or 0))

    def update(self, e: Experiment) -> None:
        e.updated_ns = time.time_ns()
        with self.store.transaction() as db:
            db.conn.execute(
                "UPDATE experiments SET state = ?, arms = ?, decision = ?, updated_ns = ? WHERE id = ?",
                (e.state, json.dumps(e.arms), json.dumps(e.decision), e.updated_ns, e.id),
            )

    def get(self, eid: int) -> Experiment:
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM experiments WHERE id = ?", [eid]))
        if not rows:
            raise KeyError(eid)
        return _exp(rows[0])

    def lever_record(self) -> dict[str, tuple[int, int]]:
        """Each lever's live trials on this host, tune's left out: (promoted, decided)."""
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT lever, SUM(state = 'promoted'), SUM(state IN ('promoted', 'reverted')) "
                "FROM experiments WHERE cause != 'tune' GROUP BY lever"
            )
            return {str(lv): (int(p or 0), int(n or 0)) for lv, p, n in rows}

    def of_job(self, job_id: str) -> list[Experiment]:
        with self.store.reading() as db:
            return [
                _exp(r) for r in db.query("SELECT * FROM experiments WHERE job_id = ? ORDER BY id", [job_id])
            ]

    def resumable(self, workload_id: str, lever: str) -> list[Experiment]:
        """The workload's live trials of ``lever`` that ended with their job (or with gitmd) before
        deciding and that no later trial has continued: their pairs are evidence about the
        workload, and the next run's trial of the same lever continues from them."""
        if not workload_id:
            return []
        with self.store.reading() as db:
            rows = db.query(
                "SELECT e.* FROM experiments e JOIN jobs j ON j.id = e.job_id WHERE j.workload_id = ? "
                "AND e.lever = ? AND e.state = 'abandoned' "
                "AND json_extract(e.decision, '$.continued_in') IS NULL ORDER BY e.id",
                [workload_id, lever],
            )
            return [_exp(r) for r in rows]

    def stalled(self, workload_id: str, lever: str, runs: int = 2) -> bool:
        """The workload's latest ``runs`` unfinished trials of ``lever`` each ended with no pair of
        their own (pairs carried from earlier runs are not theirs): its runs end before a pair of
        windows fits, so continuing the trial is no reason to observe the next one (flax's 10-s
        training continued a CPU-placement trial on every run and added nothing, H200 2026-12-04).
        The stall lasts while the program's runs stay that short: a later clean run of the workload
        (exit code 0, or none reported) that lasted at least twice as long as the longest of those
        tries' runs ends it."""
        if not workload_id:
            return False
        with self.store.reading() as db:
            # by its runs' order (as workload_trials); a trial gitmd's own restart cut short says
            # nothing about the runs' length
            # (a list: the rows are read twice)
            rows = list(
                db.query(
                    "SELECT e.arms, j.created_ns, j.ended_ns "
                    "FROM experiments e JOIN jobs j ON j.id = e.job_id "
                    "WHERE j.workload_id = ? AND e.lever = ? AND e.state = 'abandoned' "
                    "AND COALESCE(json_extract(e.decision, '$.reason'), '') != ? "
                    "ORDER BY j.created_ns DESC, e.id DESC LIMIT ?",
                    [workload_id, lever, RESTARTED, runs],
                )
            )
            own = [[a for a in json.loads(r["arms"] or "[]") if "from" not in a] for r in rows]
            if len(own) != runs or any(pairs_of(a) for a in own):
                return False
            lasted = [int(r["ended_ns"]) - int(r["created_ns"]) for r in rows if r["ended_ns"]]
            if not lasted:
                return True
            (longer,) = db.conn.execute(
                "SELECT MAX(ended_ns - created_ns) FROM jobs WHERE workload_id = ? AND created_ns > ? "
                "AND state = 'exited' AND COALESCE(exit_code, 0) = 0 AND ended_ns IS NOT NULL",
                [workload_id, max(int(r["created_ns"]) for r in rows)],
            ).fetchone()
        return not (longer is not None and longer >= 2 * max(lasted))

    def workload_levers(self, workload_id: str) -> dict[str, str]:
        """Live levers the workload's earlier runs tried: "reverted" (decided, not kept: never
        tried on it again) or "resumable" (ended with its run undecided: the next run continues it)."""
        return {lever: state for lever, (state, _) in self.workload_trials(workload_id).items()}

    def workload_trials(self, workload_id: str) -> dict[str, tuple[str, int]]:
        """``workload_levers`` with, for each lever, when the newest run that tried it was registered."""
        if not workload_id:
            return {}
        with self.store.reading() as db:
            rows = db.query(
                "SELECT e.lever, e.state, json_extract(e.decision, '$.continued_in') AS cont, "
                "j.created_ns FROM experiments e JOIN jobs j ON j.id = e.job_id "
                "WHERE j.workload_id = ? AND e.state IN ('reverted', 'abandoned') ORDER BY j.created_ns",
                [workload_id],
            )
        out: dict[str, tuple[str, int]] = {}
        for r in rows:
            if r["state"] == "reverted":
                out[r["lever"]] = ("reverted", int(r["created_ns"]))
            elif r["cont"] is None and out.get(r["lever"], ("",))[0] != "reverted":
                out[r["lever"]] = ("resumable", int(r["created_ns"]))
        return out

    def continued(self, earlier: list[Experiment], eid: int) -> None:
        """``earlier``'s pairs are carried by experiment ``eid`` now: never continued twice."""
        with self.store.transaction() as db:
            for e in earlier:
                db.conn.execute(
                    "UPDATE experiments SET decision = json_set(decision, '$.continued_in', ?), "
                    "updated_ns = ? WHERE id = ?",
                    (eid, time.time_ns(), e.id),
                )

    def abandon_unfinished(self, reason: str) -> int:
        """At start: experiments a previous gitmd left running end as abandoned."""
        with self.store.transaction() as db:
            cur = db.conn.execute(
                "UPDATE experiments SET state = 'abandoned', decision = ?, updated_ns = ? "
                "WHERE state IN ('planned', 'baseline', 'treatment', 'decided')",
                (json.dumps({"promote": False, "reason": reason}), time.time_ns()),
            )
        return int(cur.rowcount or 0)


def _exp(r: dict[str, Any]) -> Experiment:
    return Experiment(
        id=r["id"],
        job_id=r["job_id"],
        lever=r["lever"],
        setting=json.loads(r["setting"]),
        cause=r["cause"],
        state=r["state"],
        arms=json.loads(r["arms"]),
        decision=json.loads(r["decision"]),
        created_ns=r["created_ns"],
        updated_ns=r["updated_ns"],
    )


def pairs_of(arms: list[dict[str, Any]]) -> list[tuple[float, float, float | None]]:
    """An experiment's complete pairs, (A step, B step, A's GPU-busy share), in the order measured:
    its arms come a round (two windows) at a time; a window without a step spoils only its pair."""
    out = []
    for i in range(0, len(arms) - 1, 2):
        x, y = arms[i], arms[i + 1]
        by = {x.get("arm"): x, y.get("arm"): y}
        a, b = by.get("A"), by.get("B")
        if a is None or b is None:
            continue
        sa, sb = a.get("step_ms"), b.get("step_ms")
        if sa and sb and sa > 0 and sb > 0:
            out.append((float(sa), float(sb), a.get("gpu_busy")))
    return out


class LiveExperiment:
    def __init__(
        self,
        experiments: ExperimentStore,
        interventions: Interventions,
        job_id: str,
        lever: Lever,
        cause: str,
        target: Callable[[], Target],
        measure: Callable[[], Measurement | None],
        rounds: int = 4,
        settle_s: float = 0.5,
        min_gain: float = MIN_GAIN,
        cancel: threading.Event | None = None,
        early_speedup: float = 0.0,
        cause_share: float | None = None,
        earlier: list[Experiment] | None = None,
        budget: Callable[[list[float], list[float]], str] | None = None,
        ranks: Callable[[], Mapping[int, object]] | None = None,
    ) -> None:
        """``cause_share``: the most of the job's time the cause the lever addresses can take (its
        Cause.ceiling; no gain beyond removing all of it is believed). ``earlier``: the workload's
        unfinished trials of this lever (ExperimentStore.resumable), whose pairs this one continues
        from: a job too short for a whole trial adds its pairs, and a later run decides on them all.
        ``budget``: after each of this run's pairs (its A and B step times so far), why the run can
        afford no more treatment windows ("" : it can); the trial then stops as abandoned, so the
        workload's next run continues from its pairs. ``ranks``: pid -> rank of the job's processes
        that are ranks of a distributed job (torchrun's, srun's); taken when the trial starts, a rank
        that exits before it ends abandons it (its arms switch every rank together: a trial on what
        is left of a job measures another job, and the survivors are waiting on the one gone)."""
        self.budget = budget
        self.ranked = dict(ranks()) if ranks is not None else {}
        self.cause_share = cause_share
        self.experiments = experiments
        self.interventions = interventions
        self.job_id = job_id
        self.lever = lever
        self.cause = cause
        self.target = target
        self.measure = measure
        self.rounds = rounds
        self.settle_s = settle_s
        self.min_gain = min_gain
        self.early_speedup = early_speedup
        self.cancel = cancel or threading.Event()
        self.exp = experiments.create(job_id, lever, cause)
        self.earlier = list(earlier or [])
        self.prior = [p for e in self.earlier for p in pairs_of(e.arms)]
        if self.earlier:
            # carried over whole: if this run ends before deciding too, the next continues from here
            for e in self.earlier:
                for x, y, g in pairs_of(e.arms):
                    self.exp.arms += [{"arm": "A", "step_ms": x, "gpu_busy": g, "from": e.id},
                                      {"arm": "B", "step_ms": y, "from": e.id}]  # fmt: skip
            experiments.continued(self.earlier, self.exp.id)
            self.exp.decision = {"continues": [e.id for e in self.earlier], "pairs_before": len(self.prior)}
            experiments.update(self.exp)

    def _window(self, arm: str) -> Measurement | None:
        self.exp.state = "baseline" if arm == "A" else "treatment"
        self.experiments.update(self.exp)
        iv = None
        if arm == "B":
            iv = self.interventions.apply(self.job_id, self.lever, self.target(), experiment_id=self.exp.id)
            if self.cancel.wait(self.settle_s):
                self.interventions.revert(iv.id, "experiment abandoned")
                return None
        try:
            m = self.measure()
        finally:
            if iv is not None:
                self.interventions.revert(iv.id, "between treatment windows")
        if m is not None:
            self.exp.arms.append(
                {
                    "arm": arm,
                    "window_id": m.window_id,
                    "step_ms": m.step_ms,
                    "gpu_busy": m.gpu_busy,
                    "at_ns": time.time_ns(),
                }
            )
        return m

    def run(self) -> Decision:
        try:
            return self._run()
        except LeverError as e:
            self.interventions.revert_all(f"experiment {self.exp.id} failed: {e}", self.job_id)
            self._end("failed", Decision(False, f"lever failed: {e}", None))
            raise
        except Exception as e:
            self.interventions.revert_all(f"experiment {self.exp.id} failed: {e}", self.job_id)
            self._end("failed", Decision(False, f"{type(e).__name__}: {e}", None))
            raise

    def _run(self) -> Decision:
        a: list[float] = [x for x, _, _ in self.prior]  # pairs the workload's earlier runs measured
        b: list[float] = [y for _, y, _ in self.prior]
        nonfinite = False
        busy: list[float] = [g for _, _, g in self.prior if g]  # the baseline windows' GPU-busy shares
        start = len(self.prior)
        for r in range(start, max(self.rounds, start + 1)):
            pair: dict[str, float] = {}
            for arm in ("A", "B") if r % 2 == 0 else ("B", "A"):
                if self.cancel.is_set():
                    return self._end(
                        "abandoned", Decision(False, "abandoned (job ended or gitmd stopping)", None)
                    )
                gone = self._rank_gone()
                if gone:
                    return self._end("abandoned", Decision(False, f"abandoned: {gone}", None))
                m = self._window(arm)
                if m is None:
                    return self._end(
                        "abandoned", Decision(False, "abandoned (job ended or gitmd stopping)", None)
                    )
                if m.step_ms is not None and m.step_ms > 0:
                    pair[arm] = m.step_ms
                if arm == "A" and m.gpu_busy is not None and m.gpu_busy > 0:
                    busy.append(m.gpu_busy)
                if arm == "B" and any(not math.isfinite(x) for x in m.payloads):
                    nonfinite = True
            if len(pair) == 2:  # a window without a step found spoils only its pair
                a.append(pair["A"])
                b.append(pair["B"])
            early = clearly_slower(a, b, self.min_gain, self.rounds) or self._early(a, b, nonfinite)
            if early is not None:
                break
            # from two pairs on (before, clearly_slower cannot judge a loss: stopping at one would
            # only cost the next run an observation to measure the second)
            more = self.budget is not None and r + 1 < self.rounds and len(a) >= 2
            spent = self.budget(a[start:], b[start:]) if more and self.budget is not None else ""
            if spent:
                return self._end("abandoned", Decision(False, f"abandoned: {spent}", None))
        failures = ("NaN or Inf in payload samples under the treatment",) if nonfinite else ()
        verdict = Verdict(not nonfinite, failures, ("payload samples finite",), False)
        d = early or decide(a, b, verdict, self.lever.risk, self.min_gain, paired=True)
        d = implausible(self.lever, d, busy) or beyond_cause(d, self.cause, self.cause_share) or d
        if self.prior:
            d = Decision(
                d.promote, f"{d.reason} (with {len(self.prior)} pair(s) from earlier runs)", d.interval
            )
        self.exp.state = "decided"
        self.exp.decision = decision_json(d)
        self.experiments.update(self.exp)
        if not d.promote:
            return self._end("reverted", d)
        if self.cancel.is_set():
            return self._end("abandoned", Decision(False, "abandoned before promotion", d.interval))
        iv = self.interventions.apply(self.job_id, self.lever, self.target(), experiment_id=self.exp.id)
        self.interventions.promote(iv.id, d.reason)
        return self._end("promoted", d)

    def _rank_gone(self) -> str:
        """Why the trial cannot go on: a rank of the distributed job that was there when it started
        has exited ("" : every one is alive). No arm is in force between windows."""
        if not self.ranked:
            return ""
        alive = set(self.target().pids)
        for pid, rank in sorted(self.ranked.items()):
            if pid not in alive:
                return f"rank {rank} (pid {pid}) exited: every rank takes both arms together"
        return ""

    def _early(self, a: list[float], b: list[float], nonfinite: bool) -> Decision | None:
        """Promotion before ``rounds`` pairs (``early_speedup``): after two complete pairs at least
        (one of each order), every B window at least that much faster than every A window, payloads
        finite. Not for a lever that may change numbers (its live check cannot compare them); the
        host-lever plausibility bound still applies after. Contended (H200, 2026-12-03): cpu_affinity
        4.08x took eight windows, 33 s, to decide."""
        if self.early_speedup <= 0 or nonfinite or len(a) < 2 or len(a) >= self.rounds:
            return None
        if self.lever.risk is Risk.NUMERICS:
            return None
        return early_stop(a, b, min(a) / max(b), self.early_speedup, self.rounds)

    def _end(self, state: str, d: Decision) -> Decision:
        self.exp.state = state
        self.exp.decision = decision_json(d)
        if self.earlier:
            self.exp.decision["continues"] = [e.id for e in self.earlier]
        self.experiments.update(self.exp)
        log.info(
            "experiment %d (%s on job %s): %s — %s",
            self.exp.id,
            self.lever.describe(),
            self.job_id,
            state,
            d.reason,
        )
        return d


def decision_json(d: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {"promote": d.promote, "reason": d.reason}
    if d.interval is not None:
        out.update(
            speedup=d.interval.speedup, low=d.interval.low, high=d.interval.high, pairs=d.interval.pairs
        )
    return out
