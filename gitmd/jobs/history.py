"""What earlier runs of a program did, read from the jobs table: their lengths on each clock, which
were observed and what that cost them, the frameworks they ran. The loop's backoff, settle wait,
trials and cost record ask these; JobRegistry (gitmd/jobs/registry.py) holds them as a mixin.

Each is asked of a launch key, and of one exact command line of it (``command``) where the answer
is a length or what one cost: one script runs other work by its arguments (timm's benchmark.py
--model X, or --steps N), so a length is compared only with runs of the same arguments."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from gitmd.store.db import Store

# one exact command line: its words and its directory (Job.command, Job.cwd)
Command = tuple[Sequence[str], str]


class Run(Protocol):
    """A run as the history is asked about it (Job has these)."""

    @property
    def launch_key(self) -> str: ...
    @property
    def created_ns(self) -> int: ...
    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def cwd(self) -> str: ...


def _of(command: Command | None, other: bool = False) -> tuple[str, list[object]]:
    """The SQL that keeps the runs of ``command`` only ("" : every run of the key), or (``other``)
    every run but those, and its args."""
    if command is None:
        return "", []
    return f"AND {'NOT ' if other else ''}(command = ? AND cwd = ?) ", [
        json.dumps(list(command[0])),
        command[1],
    ]


# A run's length on each clock, as the jobs table holds it: the column, and which runs have it.
# "run_s": its first process's CUDA initialisation to its last exit, whoever timed it: the shim
# (its ring's creation to the last exit), or gitmd's clock library for a run that went without the
# shim; "cuda_s": the same column, of runs that went without the shim only (no CUPTI: a launch
# trial's arm, a resting run); "wall_s": the launcher's, exec to exit.
CLOCKS = ("run_s", "cuda_s", "wall_s")


def _clock(clock: str, with_shim: bool = False) -> tuple[str, str]:
    """The column that holds ``clock`` and the SQL that keeps the runs measured on it; ``with_shim``:
    for "cuda_s" and "wall_s", the runs that had the shim too (on the same milestones, holding
    gitmd's own cost: a wider spread, for a slower lever's stop only)."""
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}")
    if clock == "run_s":
        return "run_s", ""
    return ("run_s" if clock == "cuda_s" else "wall_s"), ("" if with_shim else "AND capture = 0 ")


class RunHistory:
    store: Store

    def earlier_runs_s(
        self,
        launch_key: str,
        before_ns: int,
        runs: int = 3,
        clock: str = "registration",
        command: Command | None = None,
        other: bool = False,
    ) -> list[float]:
        """How long each of the latest ``runs`` runs of ``launch_key`` (of ``command`` only; or,
        ``other``, of every other command line) that exited cleanly (exit code 0, or none reported)
        before ``before_ns`` lasted, newest first: a failed run says nothing of how long the program
        runs. ``clock``: "registration" (registration to exit) or "run_s" (its first process's CUDA
        start to the last exit: the shim's, or the clock library's for a run without it)."""
        if not launch_key:
            return []
        if clock not in ("registration", "run_s"):
            raise ValueError(f"unknown clock {clock!r}")
        span = "run_s" if clock == "run_s" else "(ended_ns - created_ns) / 1e9"
        same, args = _of(command, other)
        with self.store.reading() as db:
            rows = db.conn.execute(
                f"SELECT {span} FROM jobs WHERE launch_key = ? AND created_ns < ? {same}"
                "AND state = 'exited' AND COALESCE(exit_code, 0) = 0 AND ended_ns IS NOT NULL "
                f"{'AND run_s > 0 ' if clock == 'run_s' else ''}ORDER BY created_ns DESC LIMIT ?",
                [launch_key, before_ns, *args, runs],
            ).fetchall()
            return [float(r[0]) for r in rows]

    # A run's program as far as its lengths go: its own command line's runs, topped up, while that
    # line has fewer (its first runs, or a line that changes every run: a seed, a dated directory),
    # with its launch key's other lines' (the same script with other arguments: the best guess there
    # is, as before command lines were told apart; what a length is *compared* with is never topped
    # up: gitmd/loop/cost.py)
    def program_runs_s(self, run: Run, runs: int = 3, clock: str = "registration") -> list[float]:
        """earlier_runs_s of ``run``'s program: its command line's latest, then its key's other lines'."""
        line = (run.command, run.cwd)
        mine = self.earlier_runs_s(run.launch_key, run.created_ns, runs, clock, line)
        if len(mine) >= runs:
            return mine
        return mine + self.earlier_runs_s(run.launch_key, run.created_ns, runs - len(mine), clock, line, True)

    def program_cost_shares(self, run: Run, runs: int = 3) -> list[float]:
        """observed_cost_shares of ``run``'s program: its command line's latest, then its key's other
        lines'."""
        line = (run.command, run.cwd)
        mine = self.observed_cost_shares(run.launch_key, run.created_ns, runs, line)
        if len(mine) >= runs:
            return mine
        return mine + self.observed_cost_shares(run.launch_key, run.created_ns, runs - len(mine), line, True)

    def program_window_slowdown(self, run: Run) -> float | None:
        """window_slowdown of ``run``'s program: its command line's latest observed run, else its key's."""
        mine = self.window_slowdown(run.launch_key, run.created_ns, (run.command, run.cwd))
        return mine if mine is not None else self.window_slowdown(run.launch_key, run.created_ns)

    def observation_record(
        self, launch_key: str, before_ns: int, command: Command | None = None, workload_id: str = ""
    ) -> tuple[int, int, int]:
        """Of the ended runs of ``launch_key`` registered before ``before_ns`` (its whole history),
        of those with this exact ``command`` (its words, its directory), or of the workload's
        (``workload_id``, whatever their key): how many had a capture window, how many runs came
        after the newest of those (all of them when none had one), and when that newest one was
        registered (0: none)."""
        if not launch_key and not workload_id:
            return 0, 0, 0
        same, of = _of(command)
        which = "workload_id = ?" if workload_id else "launch_key = ?"
        ended = f"{which} AND created_ns < ? {same}AND state IN ('exited', 'lost')"
        args: list[object] = [workload_id or launch_key, before_ns, *of]
        with self.store.reading() as db:
            observed, last = db.conn.execute(
                f"SELECT COUNT(*), MAX(created_ns) FROM jobs WHERE {ended} AND windows > 0", args
            ).fetchone()
            (since,) = db.conn.execute(
                f"SELECT COUNT(*) FROM jobs WHERE {ended} AND created_ns > ?", [*args, last or 0]
            ).fetchone()
        return int(observed), int(since), int(last or 0)

    def observed_cost_shares(
        self,
        launch_key: str,
        before_ns: int,
        runs: int = 3,
        command: Command | None = None,
        other: bool = False,
    ) -> list[float]:
        """What gitmd cost each of the latest ``runs`` ended runs of ``launch_key`` registered
        before ``before_ns`` that had a capture window, as a share of the run (their cost record's
        ``share``: measured where it could be, else modelled; gitmd/loop/cost.py), newest first;
        runs whose share is not known are left out."""
        if not launch_key:
            return []
        same, args = _of(command, other)
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT json_extract(cost, '$.share') FROM jobs WHERE launch_key = ? AND created_ns < ? "
                f"{same}AND state IN ('exited', 'lost') AND windows > 0 AND json_valid(cost) "
                "ORDER BY created_ns DESC LIMIT ?",
                [launch_key, before_ns, *args, runs],
            ).fetchall()
        return [float(r[0]) for r in rows if r[0] is not None]

    def window_slowdown(
        self, launch_key: str, before_ns: int, command: Command | None = None
    ) -> float | None:
        """What an open capture window cost the latest observed run of ``launch_key`` registered
        before ``before_ns``, as a fraction of the window's time, by gitmd's launch-cost model (its
        cost record's capture_model_s over window_s; gitmd/loop/cost.py); None when no such run."""
        if not launch_key:
            return None
        same, args = _of(command)
        with self.store.reading() as db:
            row = db.conn.execute(
                "SELECT json_extract(cost, '$.capture_model_s'), json_extract(cost, '$.window_s') FROM jobs "
                f"WHERE launch_key = ? AND created_ns < ? {same}AND state IN ('exited', 'lost') "
                "AND windows > 0 AND json_valid(cost) ORDER BY created_ns DESC LIMIT 1",
                [launch_key, before_ns, *args],
            ).fetchone()
        if row is None or row[0] is None or not row[1]:
            return None
        return max(0.0, float(row[0]) / float(row[1]))

    def launched_before(self, run: Run) -> bool:
        """Whether ``run``'s exact command line was launched here before it (whatever became of
        that run: it may still be running)."""
        if not run.launch_key:
            return False
        with self.store.reading() as db:
            row = db.conn.execute(
                "SELECT 1 FROM jobs WHERE launch_key = ? AND command = ? AND cwd = ? AND created_ns < ? "
                "LIMIT 1",
                [run.launch_key, json.dumps(list(run.command)), run.cwd, run.created_ns],
            ).fetchone()
        return row is not None

    def workload_runs_since(self, workload_id: str, after_ns: int) -> int:
        """How many runs of the workload were registered after ``after_ns`` (those not yet known
        as its runs, still unfingerprinted, are not counted)."""
        with self.store.reading() as db:
            (n,) = db.conn.execute(
                "SELECT COUNT(*) FROM jobs WHERE workload_id = ? AND created_ns > ?", [workload_id, after_ns]
            ).fetchone()
        return int(n)

    def observed_between(self, workload_id: str, after_ns: int, before_ns: int) -> int:
        """How many ended runs of the workload registered strictly between the two times had a
        capture window."""
        with self.store.reading() as db:
            (n,) = db.conn.execute(
                "SELECT COUNT(*) FROM jobs WHERE workload_id = ? AND created_ns > ? AND created_ns < ? "
                "AND state IN ('exited', 'lost') AND windows > 0",
                [workload_id, after_ns, before_ns],
            ).fetchone()
        return int(n)

    def latest_of_workload(self, workload_id: str, runs: int = 20) -> list[str]:
        """The ids of the workload's latest ``runs`` runs, newest first."""
        if not workload_id:
            return []
        with self.store.reading() as db:
            rows = db.conn.execute(
                "SELECT id FROM jobs WHERE workload_id = ? ORDER BY created_ns DESC LIMIT ?",
                (workload_id, runs),
            ).fetchall()
        return [r[0] for r in rows]

    def unobserved_runs_s(
        self,
        launch_key: str,
        policy_id: int,
        exclude: set[str],
        runs: int = 9,
        clock: str = "run_s",
        command: Command | None = None,
    ) -> list[float]:
        """The run lengths of the latest ``runs`` runs of ``launch_key`` with this policy that had no
        capture window and were no launch trial's run (their cost record says arm ""), ended
        cleanly, less ``exclude``: what the program takes when gitmd only launches it. ``clock``:
        one of CLOCKS; on "cuda_s" and "wall_s", runs without the shim only (CUPTI merely loaded
        costs a run too)."""
        if not launch_key:
            return []
        column, which = _clock(clock)
        same, args = _of(command)
        with self.store.reading() as db:
            rows = db.query(
                f"SELECT id, {column} AS t FROM jobs WHERE launch_key = ? {same}AND state = 'exited' "
                f"AND exit_code = 0 AND crash = '' AND {column} > 0 AND windows = 0 "
                f"AND policy_id = ? {which}"
                "AND (CASE WHEN json_valid(cost) THEN json_extract(cost, '$.arm') END) = '' "
                "ORDER BY created_ns DESC LIMIT ?",
                [launch_key, *args, policy_id, runs + len(exclude)],
            )
            return [float(r["t"]) for r in rows if r["id"] not in exclude][:runs]

    def plain_runs_s(
        self,
        launch_key: str,
        exclude: set[str],
        runs: int = 5,
        clock: str = "run_s",
        command: Command | None = None,
        with_shim: bool = False,
    ) -> list[float]:
        """The run lengths of the latest ``runs`` runs of ``launch_key`` that ended cleanly with no
        policy, no crash and no launch trial's lever (its B arm), less ``exclude`` (job ids): the
        workload's run-to-run spread. ``clock``: one of CLOCKS; on "cuda_s" and "wall_s", runs that
        went without the shim only, unless ``with_shim``: then those that had it too, whose lengths
        hold gitmd's own cost."""
        if not launch_key:
            return []
        column, which = _clock(clock, with_shim)
        same, args = _of(command)
        with self.store.reading() as db:
            rows = db.query(
                f"SELECT id, {column} AS t FROM jobs WHERE launch_key = ? {same}AND state = 'exited' "
                f"AND exit_code = 0 AND policy_id = 0 AND crash = '' AND {column} > 0 {which}"
                "AND COALESCE(CASE WHEN json_valid(cost) THEN json_extract(cost, '$.arm') END, '') != 'B' "
                "ORDER BY created_ns DESC LIMIT ?",
                [launch_key, *args, runs + len(exclude)],
            )
            return [float(r["t"]) for r in rows if r["id"] not in exclude][:runs]

    def workload_frameworks(self, workload_id: str) -> dict[str, str]:
        """The frameworks the workload's latest run that recorded any ran ({} : none did)."""
        if not workload_id:
            return {}
        with self.store.reading() as db:
            row = db.conn.execute(
                "SELECT frameworks FROM jobs WHERE workload_id = ? AND frameworks != '' "
                "ORDER BY created_ns DESC LIMIT 1",
                [workload_id],
            ).fetchone()
        try:
            got = json.loads(row[0]) if row else {}
        except json.JSONDecodeError:
            return {}
        return {str(k): str(v) for k, v in got.items()} if isinstance(got, dict) else {}
