"""The job registry: the one map of job <-> processes (through its ring files) <-> state, in SQLite.

Registration creates the job's runtime directory and its launch plan. The shape is the one later
stages extend (launch keys, GPUs, equivalence contracts, exploration).
"""

from __future__ import annotations

import dataclasses
import json
import pwd
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmd.config import CaptureConfig
from gitmd.errors import InvalidArgumentError, NotFoundError, ResourceExhaustedError
from gitmd.experiments.equivalence import Contract
from gitmd.jobs.history import RunHistory
from gitmd.jobs.launch import LaunchPlan, build_plan, find_shim, make_job_dir
from gitmd.jobs.launch_key import default_name, launch_key, owned
from gitmd.jobs.liveness import start_ticks
from gitmd.store import audit
from gitmd.store.db import Store

MAX_NAME = 200
MAX_CWD = 4096  # PATH_MAX
MAX_COMMAND_ARGS = 4096
MAX_COMMAND_BYTES = 1 << 20
_NAME_OK = re.compile(r"^[\w.\-:@+/ ]*$")
_ID_PREFIX = re.compile(r"[0-9a-f]{4,11}")  # job ids are 12 hex digits
_NAME_BAD = re.compile(r"[^\w.\-:@+/ ]")


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    command: tuple[str, ...]
    cwd: str
    uid: int
    gid: int
    state: str
    created_ns: int
    ended_ns: int | None
    exit_code: int | None
    runtime_dir: str
    capture: bool
    launch_key: str = ""
    workload_id: str = ""
    gpus: tuple[int, ...] = ()
    contract: Contract = field(default_factory=Contract)
    allow_exploration: bool = True
    scheduler_job_id: str = ""
    scheduler_closes: bool = False
    background: bool = False  # yields its GPU to foreground jobs (cotenant_yield)
    # kept once it has ended (while it runs, the daemon's memory has them): its capture windows,
    # the policy it was launched with, its steps as its last window found them (JSON; "" none)
    windows: int = 0
    policy_id: int = 0
    steps: str = ""
    # its run by its own clock, first CUDA initialisation to last exit (None: not known), and, when
    # it died by a signal while gitmd had something in force on it, what that was ("" otherwise)
    run_s: float | None = None
    crash: str = ""
    # its command from exec to exit as its launcher timed it (None: not known, e.g. scheduler-closed)
    wall_s: float | None = None
    # the process that registered it and waits for it (pid, start ticks; (0, 0): not known): a job
    # without the shim is alive while it is (Exits.reap)
    launcher: tuple[int, int] = (0, 0)
    phase: str = ""  # the loop's phase (gitmd/loop/state.py), as last written
    cost: str = ""  # what gitmd cost its run (JSON, gitmd/loop/cost.py); "" : not known

    @property
    def user(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


@dataclass(frozen=True)
class Registration:
    """What a scheduler or launcher says about a job before it starts."""

    name: str
    command: tuple[str, ...]
    cwd: str
    uid: int
    gid: int
    capture: bool = True
    launch_key: str = ""
    gpus: tuple[int, ...] = ()
    contract: Contract = field(default_factory=Contract)
    allow_exploration: bool = True
    scheduler_job_id: str = ""
    scheduler_closes: bool = False  # the scheduler reports the end (honoured for scheduler callers)
    background: bool = False  # it yields its GPU to foreground jobs
    cpus: tuple[int, ...] = ()  # the CPUs the job will start on (its launcher's affinity), if said
    # the registering process (from the kernel, through the caller's token; 0: not local): a job that
    # runs without the shim is alive while it is (Exits.reap)
    launcher_pid: int = 0


def launcher_of(pid: int) -> tuple[int, int]:
    """The registering process that waits for the job, (pid, start ticks); (0, 0) when it is not
    known: not local, not the job's own user (Registration.launcher_pid), or not visible here
    (another PID namespace, hidepid)."""
    ticks = start_ticks(pid) if pid > 0 else None
    return (0, 0) if ticks is None else (pid, ticks)


def _row_to_job(r: dict[str, Any]) -> Job:
    return Job(
        id=r["id"],
        name=r["name"],
        command=tuple(json.loads(r["command"])),
        cwd=r["cwd"],
        uid=r["uid"],
        gid=r["gid"],
        state=r["state"],
        created_ns=r["created_ns"],
        ended_ns=r["ended_ns"],
        exit_code=r["exit_code"],
        runtime_dir=r["runtime_dir"],
        capture=bool(r["capture"]),
        launch_key=r["launch_key"],
        workload_id=r["workload_id"],
        gpus=tuple(json.loads(r["gpus"])),
        contract=Contract.from_json(json.loads(r["contract"])),
        allow_exploration=bool(r["allow_exploration"]),
        scheduler_job_id=r["scheduler_job_id"],
        scheduler_closes=bool(r["scheduler_closes"]),
        background=bool(r["background"]),
        windows=r["windows"],
        policy_id=r["policy_id"],
        steps=r["steps"],
        run_s=r.get("run_s"),
        crash=r.get("crash") or "",
        wall_s=r.get("wall_s"),
        launcher=(int(r.get("launcher_pid") or 0), int(r.get("launcher_ticks") or 0)),
        phase=r.get("phase") or "",
        cost=r.get("cost") or "",
    )


# a job row's bytes, as the triggers of migration 0025 count them into user_bytes
ROW_BYTES = " + ".join(
    f"ifnull(length(CAST({c} AS BLOB)), 0)"  # bytes: length() of TEXT counts characters
    for c in ("name", "command", "cwd", "launch_key", "workload_id", "runtime_dir", "gpus", "contract",
              "scheduler_job_id", "steps", "crash", "phase", "cost")
)  # fmt: skip


class JobRegistry(RunHistory):
    """Jobs: registration, lookups, their phase and end; what earlier runs of a program did is
    RunHistory's (gitmd/jobs/history.py)."""

    def __init__(
        self,
        store: Store,
        runtime_dir: Path,
        capture: CaptureConfig,
        max_per_user: int = 128,
        bytes_per_user: int = 256 << 20,
    ) -> None:
        self.store = store
        self.jobs_dir = runtime_dir / "jobs"
        self.capture_cfg = capture
        self.max_per_user = max_per_user  # daemon.max_jobs_per_user
        self.bytes_per_user = bytes_per_user  # daemon.stored_bytes_per_user

    def _room(self, uid: int, need: int) -> None:
        """Room in the store for a registration of ``need`` bytes by ``uid``: within
        daemon.stored_bytes_per_user (user_bytes, kept by triggers: migration 0025), after deleting
        that user's oldest ended jobs if it takes that (just enough of them, with their reports;
        never one an intervention still names or a running launch trial still counts); else
        RESOURCE_EXHAUSTED, nothing changed."""
        with self.store.reading() as db:
            row = db.conn.execute("SELECT bytes FROM user_bytes WHERE uid = ?", [uid]).fetchone()
        if row is None or row[0] + need <= self.bytes_per_user:
            return  # the common case: one primary-key read
        with self.store.transaction() as db:
            for _ in range(64):
                held = db.conn.execute("SELECT bytes FROM user_bytes WHERE uid = ?", [uid]).fetchone()[0]
                excess = held + need - self.bytes_per_user
                if excess <= 0:
                    return
                old, freed = [], 0
                for jid, size in db.conn.execute(
                    f"SELECT id, {ROW_BYTES} FROM jobs WHERE uid = ? AND ended_ns IS NOT NULL "
                    "AND id NOT IN (SELECT job_id FROM interventions) AND id NOT IN (SELECT "
                    "json_extract(r.value, '$.job_id') FROM launch_trials t, json_each(t.runs) r "
                    "WHERE t.state = 'running') ORDER BY ended_ns LIMIT 256",
                    [uid],
                ):
                    old.append(jid)
                    freed += size
                    if freed >= excess:  # just enough of the oldest: the rest stay
                        break
                if not old:
                    break
                marks = ",".join("?" * len(old))
                db.conn.execute(f"DELETE FROM job_reports WHERE job_id IN ({marks})", old)
                db.conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", old)
        raise ResourceExhaustedError(
            f"uid {uid}'s jobs hold {held >> 20} MiB in gitmd's store, the most one user may "
            f"(daemon.stored_bytes_per_user, {self.bytes_per_user >> 20} MiB); wait for a job to end"
        )

    def register(
        self,
        reg: Registration,
        resolve: Callable[[str], str] | None = None,
        audit_row: dict[str, Any] | None = None,
    ) -> tuple[Job, LaunchPlan]:
        """Register; ``resolve`` maps the launch key to a known workload id (or "") in the same step.
        ``audit_row`` (its target set to the new job's id) is committed in the same transaction."""
        name, command, cwd, uid, gid, capture, key = (
            reg.name,
            list(reg.command),
            reg.cwd,
            reg.uid,
            reg.gid,
            reg.capture,
            reg.launch_key,
        )
        if len(reg.gpus) > 1024 or any(g < 0 or g > 65535 for g in reg.gpus):
            raise InvalidArgumentError("gpus must be GPU indices")
        if len(reg.scheduler_job_id) > 256 or "\0" in reg.scheduler_job_id:
            raise InvalidArgumentError("scheduler job id must be at most 256 characters without NUL")
        if len(name) > MAX_NAME or not _NAME_OK.fullmatch(name):
            raise InvalidArgumentError(
                f"job name must be at most {MAX_NAME} of letters, digits, . - _ : @ + / space"
            )
        if len(command) > MAX_COMMAND_ARGS or sum(len(a) for a in command) > MAX_COMMAND_BYTES:
            raise InvalidArgumentError("command too long")
        if any("\0" in a for a in command) or "\0" in cwd:
            raise InvalidArgumentError("command and cwd must not contain NUL bytes")
        if len(cwd) > MAX_CWD:  # a 50 MB cwd made every later `gitmctl jobs` too large to answer
            raise InvalidArgumentError(f"cwd must be at most {MAX_CWD} characters (a path)")
        if len(key) > 4096 or "\0" in key:
            raise InvalidArgumentError("launch key must be at most 4096 characters without NUL")
        with self.store.reading() as db:  # before anything is made for the job (one indexed count)
            # counted no further than the cap: a user's open jobs cost every registration at most
            # max_per_user index entries (counting them all made registration O(open jobs))
            open_jobs = db.conn.execute(
                "SELECT COUNT(*) FROM (SELECT 1 FROM jobs "
                "WHERE uid = ? AND state IN ('registered', 'running') LIMIT ?)",
                [uid, self.max_per_user],
            ).fetchone()[0]
        if open_jobs >= self.max_per_user:
            raise ResourceExhaustedError(
                f"uid {uid} has {open_jobs} open jobs, the most one user may have "
                "(daemon.max_jobs_per_user); wait for one to end"
            )
        key = owned(uid, key or launch_key(command, cwd))
        self._room(uid, sum(len(a) + 4 for a in command) + len(cwd) + len(key) + len(name))
        workload_id = resolve(key) if resolve else ""
        job_id = uuid.uuid4().hex[:12]
        name = name or _NAME_BAD.sub("_", default_name(command))[:MAX_NAME] or job_id
        warnings: list[str] = []
        job_dir = shim = None
        if capture:
            shim, why = find_shim(self.capture_cfg.shim_path)
            if why:
                warnings.append(f"the job runs untraced: {why}")
            else:
                job_dir, why = make_job_dir(self.jobs_dir, job_id, uid, gid)
                if why:
                    warnings.append(why)
        plan = build_plan(
            job_id,
            job_dir,
            shim,
            self.capture_cfg.ring_records,
            warnings,
            self.capture_cfg.free_guard,
            self.capture_cfg.detach_cupti,
            self.capture_cfg.cupti_path,
        )
        job = Job(
            id=job_id,
            name=name,
            command=tuple(command),
            cwd=cwd,
            uid=uid,
            gid=gid,
            state="registered",
            created_ns=time.time_ns(),
            ended_ns=None,
            exit_code=None,
            runtime_dir=str(job_dir) if job_dir else "",
            capture=plan.capture,
            launch_key=key,
            workload_id=workload_id,
            gpus=tuple(reg.gpus),
            contract=reg.contract,
            allow_exploration=reg.allow_exploration,
            scheduler_job_id=reg.scheduler_job_id,
            scheduler_closes=reg.scheduler_closes,
            background=reg.background,
            launcher=launcher_of(reg.launcher_pid),
        )
        with self.store.transaction() as db:
            # A plain prepared INSERT: sqlite-utils' insert() looks the table up in sqlite_master and
            # wraps itself in a savepoint each time (5 extra statements on the hot registration path).
            self._insert_job(
                db,
                {
                    "id": job.id,
                    "name": job.name,
                    "command": json.dumps(list(job.command)),
                    "cwd": job.cwd,
                    "uid": uid,
                    "gid": gid,
                    "state": job.state,
                    "created_ns": job.created_ns,
                    "runtime_dir": job.runtime_dir,
                    "capture": int(job.capture),
                    "launch_key": key,
                    "workload_id": workload_id,
                    "gpus": json.dumps(list(reg.gpus)),
                    "contract": json.dumps(reg.contract.to_json()),
                    "allow_exploration": int(reg.allow_exploration),
                    "scheduler_job_id": reg.scheduler_job_id,
                    "scheduler_closes": int(reg.scheduler_closes),
                    "background": int(reg.background),
                    "launcher_pid": job.launcher[0],
                    "launcher_ticks": job.launcher[1],
                },
            )
            if audit_row is not None:
                audit.insert(db, {**audit_row, "target": job.id, "scheduler_job_id": reg.scheduler_job_id})
        return job, plan

    @staticmethod
    def _insert_job(db: Any, row: dict[str, Any]) -> None:
        cols = ", ".join(row)
        db.conn.execute(f"INSERT INTO jobs ({cols}) VALUES ({', '.join(':' + c for c in row)})", row)

    def get(self, id_or_name: str, uid: int | None = None) -> Job:
        """A job by its id, its name (the latest job of that name), or a unique prefix of its id
        (at least 4 characters, as `git` takes commits). ``uid``: names and prefixes are looked up
        among that user's jobs only (job names are each user's own: another user's job of the same
        name is not the one they mean, nor theirs to learn of)."""
        mine, args = ("AND uid = ? ", [uid]) if uid is not None else ("", [])
        with self.store.reading() as db:
            rows = list(db.query("SELECT * FROM jobs WHERE id = ?", [id_or_name]))
            if not rows:
                rows = list(
                    db.query(
                        f"SELECT * FROM jobs WHERE name = ? {mine}ORDER BY created_ns DESC LIMIT 1",
                        [id_or_name, *args],
                    )
                )
            if not rows and _ID_PREFIX.fullmatch(id_or_name):
                rows = list(
                    db.query(f"SELECT * FROM jobs WHERE id LIKE ? {mine}LIMIT 2", [id_or_name + "%", *args])
                )
                if len(rows) > 1:
                    raise InvalidArgumentError(f"job id prefix {id_or_name!r} is ambiguous: give more of it")
        if not rows:
            shown = id_or_name if len(id_or_name) <= 200 else id_or_name[:200] + "..."  # never a 1 MB echo
            raise NotFoundError(f"no job with id or name {shown!r}")
        return _row_to_job(rows[0])

    def list(self, include_exited: bool, scheduler_job_id: str = "") -> list[Job]:
        clauses, args = [], []
        if not include_exited:
            clauses.append("state NOT IN ('exited', 'lost')")
        if scheduler_job_id:
            clauses.append("scheduler_job_id = ?")
            args.append(scheduler_job_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.store.reading() as db:
            rows = db.query(f"SELECT * FROM jobs {where} ORDER BY created_ns", args)
            return [_row_to_job(r) for r in rows]

    def untrace(self, job: Job, phase: str) -> Job:
        """A job just registered goes without the shim after all (a run the observation backoff
        leaves unobserved, Launch.register): no ring directory, capture off in its row, its phase
        (which no window will move on) written. One write, no read: the caller holds the job."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET capture = 0, runtime_dir = '', phase = ? WHERE id = ?", [phase, job.id]
            )
        if job.runtime_dir:
            shutil.rmtree(job.runtime_dir, ignore_errors=True)
        return dataclasses.replace(job, capture=False, runtime_dir="", phase=phase)

    def set_frameworks(self, job_id: str, frameworks: dict[str, str]) -> None:
        """The frameworks its process runs (gitmd/jobs/frameworks.py), kept with the job."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET frameworks = ? WHERE id = ?",
                [json.dumps(frameworks, sort_keys=True), job_id],
            )

    def set_workload(self, job_id: str, workload_id: str) -> None:
        with self.store.transaction() as db:
            db.execute("UPDATE jobs SET workload_id = ? WHERE id = ?", [workload_id, job_id])

    def set_phase(self, job_id: str, phase: str) -> None:
        with self.store.transaction() as db:
            db.execute("UPDATE jobs SET phase = ? WHERE id = ?", [phase, job_id])

    def set_state(self, job_id: str, state: str) -> None:
        with self.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET state = ? WHERE id = ? AND state NOT IN ('exited', 'lost')", [state, job_id]
            )

    def exited(
        self,
        job_id: str,
        exit_code: int,
        state: str = "exited",
        windows: int = 0,
        policy_id: int = 0,
        steps: str = "",
        run_s: float | None = None,
        crash: str = "",
        cost: str = "",
        wall_s: float | None = None,
    ) -> Job:
        """The job ended: its state, exit code and what its run came to (windows, policy, steps, its
        length by its own clock and by its launcher's, a crash that may be gitmd's)."""
        job = self.get(job_id)
        if job.id != job_id:
            raise NotFoundError(f"no job with id {job_id!r}")
        values = {"state": state, "ended": time.time_ns(), "code": exit_code, "windows": windows,
                  "policy": policy_id, "steps": steps, "run_s": run_s, "crash": crash, "cost": cost,
                  "wall_s": wall_s, "id": job_id}  # fmt: skip
        with self.store.transaction() as db:
            db.execute(
                "UPDATE jobs SET state = :state, ended_ns = :ended, exit_code = :code, windows = :windows, "
                "policy_id = :policy, steps = :steps, run_s = COALESCE(:run_s, run_s), "
                "wall_s = COALESCE(:wall_s, wall_s), "
                "crash = CASE WHEN :crash = '' THEN crash ELSE :crash END, "
                "cost = CASE WHEN :cost = '' THEN cost ELSE :cost END WHERE id = :id",
                values,
            )
        if job.runtime_dir:
            shutil.rmtree(job.runtime_dir, ignore_errors=True)
        return self.get(job_id)
