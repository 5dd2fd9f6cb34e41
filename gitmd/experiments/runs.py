"""Launch levers across runs of a recurring job (its registration allows exploration).

When gitmd's attribution of a run finds a cause that a launch lever addresses, it plans a trial
for the run's workload. Every later registration of that workload (while the trial runs) gets an
arm in its launch plan: pairs of runs alternate their order (AB, BA, ...), B with the lever's
environment. A run's metric is its length by its own clock, the same milestones in both arms: from
its first process's CUDA initialisation to its last process's exit — what a user timing the job
sees. Trial runs get no capture window, so CUPTI never attaches to either arm: windows at other
moments of a run, or with CUPTI attached at other costs, measured other things (a 3.0x promoted on
windows where the program's own batches showed ~1.0x, H200 2026-12-03). A job that does fixed work
gets faster runs; one that runs for a fixed time shows no gain, so nothing is promoted — never a
false gain. Its outputs for the contract are its exit status and the stdout metric values its
launcher reported at exit. A run that goes without the shim (gitmctl run times it: Launch.register)
is timed from its CUDA initialisation by the stamps of gitmd's clock library, loaded in the shim's
place (clock "cuda_s": the same milestones, no CUPTI), or where no stamp came back by its launcher,
exec to exit ("wall_s"); a trial's pairs compare runs on one clock only (a
pair off the trial's clock, the latest measured run's, is spoiled). Once ``rounds`` pairs are
complete the trial is decided like any experiment (paired t interval: run_decision.py; the contract
must hold in every pair); a promoted lever becomes a validated policy of the workload, so the next launch gets
it at once with no experiment.

A speedup larger than its cause allows is a measurement error, not a win: attribution said what
share of the run the cause cost, so removing it all gives at most 1 / (1 - share); a trial whose
whole interval lies above that bound is reverted as implausible, and an early stop needs the gain
within it.

A pair is two runs of one command line (each run keeps its launch_key.command_digest). A workload
is a program, and its command lines may ask it for other work (more steps, another batch, other
data): a pair of two of them measured the work, not the lever, and promoted a lever that changes
nothing at 3.000x (--steps 300 against --steps 100, 2026-12-05). Pairs of different lines may
decide together: each pair is a ratio, every pair is held against its own A, and the spread an
early stop needs is each line's own. While a pair is half done, a launch of another command line
of the workload gets no arm; once the half pair's run has ended, ``MAX_SKIPPED`` such launches in a
row leave it unpaired (its line stopped coming) and the next launch may open a new pair. Only a
line that was launched here before opens a pair (one new every run, a seed or a date in it, would
never be paired); a trial that ``MAX_FRESH`` runs of its workload have passed by since its latest
arm is abandoned (gitmd/loop/trials.py: Trials.stalled).

Runs with no length (no CUDA, failed early), runs that died by a signal (a crash is never
evidence: it may be gitmd's) and runs left unpaired spoil their pair; after ``MAX_SPOILED`` such
runs the trial is abandoned.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from gitmd.jobs.launch_key import command_digest
from gitmd.levers.launch_env import EnvLever, SiteReport
from gitmd.levers.registry import make
from gitmd.store.db import Store

MAX_SPOILED = 6
# launches of the workload's other command lines, in a row after a half-done pair's run ended,
# before that run is left unpaired
MAX_SKIPPED = 6
# runs of the workload since a trial's latest arm (or its start) before it is abandoned: its command
# lines do not recur (each run's is new: a seed or a date in it), so no pair can be made
MAX_FRESH = 12
# what a trial run's length is, by the clock it was taken on (the policy's evidence says which)
METRICS = {
    "run_s": "run_s: the run's own clock, CUDA initialisation to exit",
    "cuda_s": "cuda_s: the run's own clock, CUDA initialisation to exit, stamped by gitmd's clock library "
    "(the runs went without the shim)",
    "wall_s": "wall_s: the launcher's clock, exec to exit (the runs went without the shim)",
}


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
    cause_share: float = 0.0  # the most of the run the cause could take (its Cause.ceiling) when planned
    # the gain attribution predicted: 1 / (1 - the cause's cost share, or the smaller share the window
    # shows the lever can reach: Cause.bounds); 0: none
    predicted: float = 0.0
    skipped: int = 0  # launches of other command lines since its half-done pair's run ended
    created_ns: int = 0

    @property
    def bound(self) -> float:
        """The largest speedup removing the cause could give (inf: no share was measured)."""
        return 1.0 / (1.0 - self.cause_share) if 0 < self.cause_share < 1 else math.inf

    def lever_obj(self) -> EnvLever:
        lv = make(self.lever, **self.setting)
        assert isinstance(lv, EnvLever)
        return lv

    def paired(self) -> list[dict[str, Any]]:
        """Its runs that stand in pairs, in order (two by two): all but those left unpaired."""
        return [r for r in self.runs if not r.get("unpaired")]

    def half(self) -> dict[str, Any] | None:
        """The first run of a pair not complete yet (None: no pair is half done)."""
        runs = self.paired()
        return runs[-1] if len(runs) % 2 else None

    def next_arm(self) -> str:
        n = len(self.paired())
        first, second = ("A", "B") if (n // 2) % 2 == 0 else ("B", "A")
        return first if n % 2 == 0 else second

    def pairs(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Complete (A, B) pairs, in run order: both runs of one command line, ended with a length
        on the trial's clock (``clock``: one decision never mixes clocks), and neither crashed."""
        out = []
        clock = self.clock()
        runs = self.paired()
        for i in range(0, len(runs) - 1, 2):
            x, y = runs[i], runs[i + 1]
            if all(_measured(r) and _clock(r) == clock for r in (x, y)) and _same_work(x, y):
                out.append((x, y) if x["arm"] == "A" else (y, x))
        return out

    def spoiled(self) -> int:
        """Runs that are no evidence: ended with no length, crashed or left unpaired, and one run of
        each complete pair not on the trial's clock or of two command lines."""
        bad = sum(1 for r in self.runs if r.get("done") and (not _measured(r) or r.get("unpaired")))
        clock = self.clock()
        runs = self.paired()
        for i in range(0, len(runs) - 1, 2):
            x, y = runs[i], runs[i + 1]
            same = _clock(x) == _clock(y) == clock and _same_work(x, y)
            bad += all(_measured(r) for r in (x, y)) and not same
        return bad

    def clock(self) -> str:
        """The clock its measured runs were taken on: the latest one's ("run_s" when none is)."""
        return next((_clock(r) for r in reversed(self.paired()) if _measured(r)), "run_s")


def _measured(run: dict[str, Any]) -> bool:
    return bool(run.get("done") and run.get("run_s") and not run.get("crashed"))


def line(run: dict[str, Any]) -> str:
    """The command line a trial's run was of (launch_key.command_digest; "": not known)."""
    return str(run.get("command") or "")


def _same_work(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Two runs of one command line (a run whose line is not known, recorded before runs kept one
    and whose job is gone, is taken as such)."""
    return not (line(x) and line(y) and line(x) != line(y))


def _clock(run: dict[str, Any]) -> str:
    return str(run.get("clock") or "run_s")  # runs recorded before the launcher's clock: the shim's


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
        float(r.get("cause_share") or 0.0),
        float(r.get("predicted") or 0.0),
        int(r.get("skipped") or 0),
        int(r.get("created_ns") or 0),
    )


def _lines_of(db: Any, runs: list[dict[str, Any]]) -> None:
    """Runs recorded before runs kept their command line: theirs, from the jobs table (a running
    trial's jobs are never pruned: JobRegistry)."""
    for r in runs:
        if "command" not in r:
            row = db.conn.execute("SELECT command, cwd FROM jobs WHERE id = ?", [r["job_id"]]).fetchone()
            if row is not None:
                r["command"] = command_digest(json.loads(row[0]), row[1])


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

    def lever_record(self) -> dict[str, tuple[int, int]]:
        """Each lever's launch trials on this host: (promoted, decided), all workloads together."""
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT lever, SUM(state = 'promoted'), SUM(state IN ('promoted', 'reverted')) "
                "FROM launch_trials GROUP BY lever"
            )
            return {str(lv): (int(p or 0), int(n or 0)) for lv, p, n in rows}

    def running(self, workload_id: str) -> LaunchTrial | None:
        return next((t for t in self.of_workload(workload_id) if t.state == "running"), None)

    def plan(
        self, workload_id: str, lever: EnvLever, cause: str, cause_share: float = 0.0, predicted: float = 0.0
    ) -> LaunchTrial | None:
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
            return self._insert(db, workload_id, lever, cause, cause_share, predicted, now)

    def _insert(
        self, db: Any, workload_id: str, lever: EnvLever, cause: str, share: float, predicted: float, now: int
    ) -> LaunchTrial:
        cur = db.conn.execute(
            "INSERT INTO launch_trials (workload_id, lever, setting, cause, cause_share, predicted, "
            "state, created_ns, updated_ns) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
            (workload_id, lever.name, json.dumps(lever.setting), cause, share, predicted, now, now),
        )
        return self._get(db, int(cur.lastrowid or 0))

    def plan_confirm(self, workload_id: str, lever: EnvLever, source: str) -> LaunchTrial | None:
        """A trial of a policy another node learned (``lever``: its PolicyEnv), on this node's runs:
        none while another trial of the workload runs, and one per policy."""
        pid = lever.setting["policy"]
        seen = (
            "SELECT id FROM launch_trials WHERE workload_id = ? AND (state = 'running' OR "
            "(lever = ? AND json_extract(setting, '$.policy') = ?)) LIMIT 1"
        )
        with self.store.reading() as db:  # every registration asks: read first, write only to plan
            if db.conn.execute(seen, [workload_id, lever.name, pid]).fetchone() is not None:
                return None
        with self.store.transaction() as db:
            if db.conn.execute(seen, [workload_id, lever.name, pid]).fetchone() is not None:
                return None
            return self._insert(db, workload_id, lever, source, 0.0, 0.0, time.time_ns())

    def assign(
        self, workload_id: str, job_id: str, uid: int, command: str = "", opens: bool = True
    ) -> tuple[LaunchTrial, str] | None:
        """The running trial of the workload and this run's arm (recorded), or None when none runs.
        ``command``: the run's command line (launch_key.command_digest); ``opens``: whether that line
        was launched here before, so that a second run of it may come to pair with this one. A run
        gets arm "" (none):
        - while a pair is half done and its first run has ended, for another line, counted in
          ``skipped``; the MAX_SKIPPED-th leaves that run unpaired (uncounted while it still runs:
          its second may yet come);
        - when it would open a pair and its line was not launched here before (a seed or a date in
          every command line: no second run of it comes).
        A pair's first run that ended with no length or crashed is left unpaired at once."""
        with self.store.transaction() as db:
            rows = list(
                db.query(
                    "SELECT * FROM launch_trials WHERE workload_id = ? AND state = 'running'", [workload_id]
                )
            )
            if not rows:
                return None
            t = _trial(rows[0])
            now = time.time_ns()
            _lines_of(db, t.runs)
            half = t.half()
            if half is not None and half.get("done") and not _measured(half):
                # it ended with no length or crashed: no pair of it is evidence, so none waits for it
                half["unpaired"] = "it has no length by its clock, or crashed"
                half = None
            if half is not None and command and half.get("command", command) != command:
                if not half.get("done"):
                    return t, ""  # the pair's first run still runs: its second may yet come
                t.skipped += 1
                if t.skipped < MAX_SKIPPED:
                    return self._no_arm(db, t, now)
                half["unpaired"] = (
                    f"its command line did not run again in {t.skipped} launches of other lines"
                )
                half = None
                if not opens:
                    t.skipped = 0
                    return self._no_arm(db, t, now)
            elif half is None and not opens:
                return self._no_arm(db, t, now)
            arm = t.next_arm()
            run: dict[str, Any] = {"job_id": job_id, "arm": arm, "uid": uid, "done": False}
            if command:
                run["command"] = command
            t.runs.append(run)
            t.skipped = 0
            db.conn.execute(
                "UPDATE launch_trials SET runs = ?, skipped = 0, updated_ns = ? WHERE id = ?",
                (json.dumps(t.runs), now, t.id),
            )
            return t, arm

    @staticmethod
    def _no_arm(db: Any, t: LaunchTrial, now: int) -> tuple[LaunchTrial, str]:
        db.conn.execute(
            "UPDATE launch_trials SET runs = ?, skipped = ?, updated_ns = ? WHERE id = ?",
            (json.dumps(t.runs), t.skipped, now, t.id),
        )
        return t, ""

    def finish_run(
        self,
        job_id: str,
        trial_id: int,
        run_s: float | None,
        exit_code: int | None,
        metrics: dict[str, list[float]],
        crashed: str = "",
        clock: str = "run_s",
        site: SiteReport | None = None,
    ) -> LaunchTrial | None:
        """Record a run's end: its length on ``clock`` (METRICS; None: unknown), its outputs,
        ``crashed`` (why it is no evidence) when it died by a signal, and what gitmd's sitecustomize
        did in it (``site``, when the launcher read it). The trial as it is now (None: not found or
        no longer running)."""
        if clock not in METRICS:
            raise ValueError(f"unknown clock {clock!r}")
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
                        run_s=round(run_s, 6) if run_s else None,
                        clock=clock,
                        exit_code=exit_code,
                        metrics=metrics,
                    )
                    if crashed:
                        r["crashed"] = crashed
                    if site is not None:
                        r["site"] = {"loaded": site.loaded, "acted": list(site.acted)}
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
                    x.update(done=True, run_s=None, note=why)
                if open_runs:
                    n += len(open_runs)
                    db.conn.execute(
                        "UPDATE launch_trials SET runs = ?, updated_ns = ? WHERE id = ?",
                        (json.dumps(t.runs), time.time_ns(), t.id),
                    )
        return n

    def end(self, t: LaunchTrial, state: str, decision: dict[str, Any], as_read: bool = False) -> bool:
        """The trial ends (``state``), unless it has ended already, or (``as_read``) its runs are no
        longer those of ``t`` (another registration took an arm meanwhile): whether this call ended
        it."""
        same = " AND runs = ?" if as_read else ""
        args: tuple[Any, ...] = (state, json.dumps(decision), time.time_ns(), t.id)
        with self.store.transaction() as db:
            cur = db.conn.execute(
                "UPDATE launch_trials SET state = ?, decision = ?, updated_ns = ? "
                f"WHERE id = ? AND state = 'running'{same}",
                (*args, json.dumps(t.runs)) if as_read else args,
            )
            return cur.rowcount > 0
