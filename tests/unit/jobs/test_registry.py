import os
from pathlib import Path

import pytest

from gitmd.config import CaptureConfig
from gitmd.errors import InvalidArgumentError, NotFoundError
from gitmd.jobs.launch import find_shim
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.store.db import Store


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    p = tmp_path / "libgitm_shim.so"
    p.write_bytes(b"\x7fELF")
    return p


def make(tmp_path: Path, shim: Path | None) -> JobRegistry:
    return JobRegistry(
        Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig(shim_path=shim, ring_records=4096)
    )


def test_register_gives_a_plan_and_a_private_dir(tmp_path: Path, shim: Path) -> None:
    reg = make(tmp_path, shim)
    job, plan = reg.register(
        Registration(
            "train",
            ("python", "t.py"),
            "/w",
            os.getuid(),
            os.getgid(),
            gpus=(0, 1),
            scheduler_job_id="slurm-42",
        )
    )
    assert plan.capture and plan.warnings == ()
    assert plan.env["CUDA_INJECTION64_PATH"] == str(shim)
    assert plan.env["GITM_JOB_ID"] == job.id and plan.env["GITM_RING_RECORDS"] == "4096"
    d = Path(plan.env["GITM_JOB_DIR"])
    assert d == tmp_path / "run" / "jobs" / job.id and (d.stat().st_mode & 0o777) == 0o700
    assert reg.get(job.id) == job and reg.get("train") == job
    assert job.gpus == (0, 1) and job.scheduler_job_id == "slurm-42" and job.allow_exploration
    assert job.launch_key == f"uid:{os.getuid()} python /w/t.py" and job.user  # bound to its user
    assert [j.id for j in reg.list(False)] == [job.id]
    done = reg.exited(job.id, 0)
    assert done.state == "exited" and done.exit_code == 0 and not d.exists()
    assert reg.list(False) == [] and [j.id for j in reg.list(True)] == [job.id]


def test_missing_shim_runs_untraced_with_the_reason(tmp_path: Path) -> None:
    reg = make(tmp_path, tmp_path / "nope.so")
    job, plan = reg.register(Registration("", ("prog",), "", os.getuid(), os.getgid()))
    assert not plan.capture and "CUDA_INJECTION64_PATH" not in plan.env
    assert "does not exist" in plan.warnings[0] and job.name == "prog"


def test_unwritable_runtime_dir_runs_untraced(tmp_path: Path, shim: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the runtime dir should be")
    reg = make(tmp_path, shim)
    _, plan = reg.register(Registration("x", ("prog",), "", os.getuid(), os.getgid()))
    assert not plan.capture and "runs untraced" in plan.warnings[0]


def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path, shim: Path) -> None:
    reg = make(tmp_path, shim)
    for name, cmd in (("a\nb", ("x",)), ("x" * 500, ("x",)), ("ok", ("a\0b",)), ("ok", ("x",) * 5000)):
        with pytest.raises(InvalidArgumentError):
            reg.register(Registration(name, cmd, "", 0, 0))
    with pytest.raises(InvalidArgumentError, match="GPU indices"):
        reg.register(Registration("ok", ("x",), "", 0, 0, gpus=(-1,)))
    # a name with a trailing newline (a `$` anchor let it through) and a cwd no path can have
    with pytest.raises(InvalidArgumentError, match="job name"):
        reg.register(Registration("train\n", ("x",), "", 0, 0))
    with pytest.raises(InvalidArgumentError, match="cwd must be at most"):
        reg.register(Registration("ok", ("x",), "/" + "a" * 5000, 0, 0))
    assert reg.list(True) == []
    with pytest.raises(NotFoundError):
        reg.get("nothing")
    with pytest.raises(NotFoundError):
        reg.exited("nothing", 0)


def test_find_shim_prefers_configured() -> None:
    path, why = find_shim(Path("/definitely/not/here.so"))
    assert path is None and why is not None and "does not exist" in why


def test_the_plan_names_the_free_guard_next_to_the_shim_unless_configured_off(
    tmp_path: Path, shim: Path
) -> None:
    _, plan = make(tmp_path, shim).register(Registration("x", ("prog",), "", os.getuid(), os.getgid()))
    assert "GITM_GUARD" not in plan.env  # no guard built next to this shim
    guard = shim.parent / "libgitm_guard.so"
    guard.write_bytes(b"\x7fELF")
    _, plan = make(tmp_path, shim).register(Registration("y", ("prog",), "", os.getuid(), os.getgid()))
    assert plan.env["GITM_GUARD"] == str(guard)
    off = JobRegistry(
        Store(tmp_path / "g2.db"),
        tmp_path / "run2",
        CaptureConfig(shim_path=shim, ring_records=4096, free_guard=False),
    )
    _, plan = off.register(Registration("z", ("prog",), "", os.getuid(), os.getgid()))
    assert plan.capture and "GITM_GUARD" not in plan.env


def test_a_job_is_found_by_a_unique_prefix_of_its_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hardening issue, item 11: no way to address a job by an id prefix (as git takes commits)."""
    import uuid

    ids = iter(["abcd1234" + "0" * 24, "abcd5678" + "0" * 24, "ef01" + "0" * 28])
    monkeypatch.setattr("gitmd.jobs.registry.uuid.uuid4", lambda: uuid.UUID(next(ids)))
    reg = JobRegistry(Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig())
    made = [reg.register(Registration("", ("python3", "train.py"), "/", 1000, 1000, capture=False))[0]
            for _ in range(3)]  # fmt: skip
    assert [j.id for j in made] == ["abcd12340000", "abcd56780000", "ef0100000000"]
    assert made[0].name == "train"  # the script, not the interpreter
    assert reg.get("abcd1").id == "abcd12340000" and reg.get("ef01").id == "ef0100000000"
    with pytest.raises(InvalidArgumentError, match="ambiguous"):
        reg.get("abcd")
    with pytest.raises(NotFoundError):
        reg.get("ab%_")  # not hex: no pattern reaches the query
    with pytest.raises(NotFoundError):
        reg.get("abc")  # under 4 characters: no prefix match


def test_a_huge_unknown_job_id_is_not_echoed_back_whole(tmp_path: Path) -> None:
    """Hardening issue, item 8: a 1 MB id came back whole in the error."""
    reg = JobRegistry(Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig())
    with pytest.raises(NotFoundError) as e:
        reg.get("x" * (1 << 20))
    assert len(str(e.value)) < 400


def test_one_user_may_have_at_most_max_jobs_per_user_open(tmp_path: Path) -> None:
    """Hardening issue, item 5: no per-user job limit — each job is a row, a directory and a ring to
    watch. A user's open jobs beyond daemon.max_jobs_per_user are refused (RESOURCE_EXHAUSTED) before
    anything is made; another user is not; an ended job frees its place."""
    from gitmd.errors import ResourceExhaustedError

    reg = JobRegistry(Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig(), max_per_user=3)
    me = Registration("j", ("python", "t.py"), "/w", 4001, 4001, capture=False)
    jobs = [reg.register(me)[0] for _ in range(3)]
    with pytest.raises(ResourceExhaustedError, match="uid 4001 has 3 open jobs"):
        reg.register(me)
    reg.register(Registration("j", ("python", "t.py"), "/w", 4002, 4002, capture=False))  # another user
    reg.exited(jobs[0].id, 0)
    reg.register(me)  # one ended: its place is free


def test_one_users_jobs_hold_at_most_stored_bytes_per_user(tmp_path: Path) -> None:
    """Hardening issue: per-user stored bytes. One user registering 100-KiB commands in a loop: their
    oldest ended jobs go to make room (never another user's, never one an intervention names), the
    store's count of their bytes follows every insert, update and delete, and when their open jobs
    alone hold the cap the registration is refused with nothing changed."""
    from gitmd.errors import ResourceExhaustedError

    store = Store(tmp_path / "g.db")
    reg = JobRegistry(store, tmp_path / "run", CaptureConfig(), max_per_user=50, bytes_per_user=1 << 20)
    big = ("python", "x" * (100 << 10))

    def mine(r: JobRegistry) -> list[object]:
        return [j for j in r.list(include_exited=True) if j.uid == 4001]

    def held(uid: int) -> int:
        return int(store.conn.execute("SELECT bytes FROM user_bytes WHERE uid = ?", [uid]).fetchone()[0])

    def actual(uid: int) -> int:
        q = "SELECT command, cwd, name, launch_key, contract FROM jobs WHERE uid = ?"
        rows = store.conn.execute(q, [uid])
        return sum(len(c) + len(w) + len(n) + len(k) + len(t) for c, w, n, k, t in rows)

    other = reg.register(Registration("o", big, "/w", 4002, 4002, capture=False))[0]
    reg.exited(other.id, 0)
    first = None
    for i in range(30):  # 3 MiB of commands against a 1-MiB cap
        job = reg.register(Registration(f"j{i}", big, "/w", 4001, 4001, capture=False))[0]
        first = first or job
        reg.exited(job.id, 0)
        assert held(4001) <= 1 << 20
    with pytest.raises(NotFoundError):
        reg.get(first.id)  # the oldest went
    assert len(mine(reg)) in range(8, 11)  # ~1 MiB of the newest
    assert reg.get(other.id).uid == 4002  # another user's ended job stays
    assert held(4001) >= actual(4001) > 0  # the count covers what the rows hold
    open_jobs = []
    with pytest.raises(ResourceExhaustedError, match="stored_bytes_per_user"):
        for i in range(12):  # open jobs are never deleted: 12 x 100 KiB > 1 MiB
            open_jobs.append(reg.register(Registration(f"k{i}", big, "/w", 4001, 4001, capture=False))[0])
    n = len(mine(reg))
    assert all(j.state == "registered" for j in open_jobs) and 8 <= len(open_jobs) <= 10
    with pytest.raises(ResourceExhaustedError):
        reg.register(Registration("k", big, "/w", 4001, 4001, capture=False))
    assert len(mine(reg)) == n  # refused: nothing changed


def test_stored_bytes_count_bytes_and_spare_a_running_trials_runs(tmp_path: Path) -> None:
    """A cwd of 4-byte characters counts four bytes each (SQLite's length() of TEXT counts
    characters); an ended run a running launch trial still counts is never deleted to make room
    (its trial looks it up when it decides)."""
    import json

    store = Store(tmp_path / "g.db")
    reg = JobRegistry(store, tmp_path / "run", CaptureConfig(), bytes_per_user=1 << 20)
    cwd = "/" + "\U0001f600" * 1000
    job = reg.register(Registration("j", ("python", "t.py"), cwd, 4001, 4001, capture=False))[0]
    held = store.conn.execute("SELECT bytes FROM user_bytes WHERE uid = 4001").fetchone()[0]
    assert held >= 4001
    reg.exited(job.id, 0)
    now = 1
    store.conn.execute(
        "INSERT INTO launch_trials (workload_id, lever, setting, cause, state, runs, created_ns, updated_ns) "
        "VALUES ('w', 'cpu_threads', '{}', 'x', 'running', ?, ?, ?)",
        [json.dumps([{"job_id": job.id, "arm": "A", "done": True, "run_s": 1.0}]), now, now],
    )
    store.conn.commit()
    big = ("python", "x" * (200 << 10))
    for i in range(8):  # 1.6 MiB against a 1-MiB cap: the oldest ended jobs go, not the trial's run
        j = reg.register(Registration(f"k{i}", big, "/w", 4001, 4001, capture=False))[0]
        reg.exited(j.id, 0)
    assert reg.get(job.id).id == job.id


def test_a_programs_earlier_runs_are_its_clean_runs(tmp_path: Path) -> None:
    """What a program's next runs are planned on (the settle wait, the window budget, the time left
    for a trial's pair) is how long its earlier runs lasted: a run that failed (exit code not 0)
    says nothing of that, and a failed 2-s run made a 30-s program look short."""
    reg = JobRegistry(Store(tmp_path / "g.db"), tmp_path / "run", CaptureConfig(), max_per_user=10)
    me = Registration("j", ("python", "t.py"), "/w", 4001, 4001, capture=False)
    ok = reg.register(me)[0]
    reg.exited(ok.id, 0, run_s=30.0)
    failed = reg.register(me)[0]
    reg.exited(failed.id, 1, run_s=2.0)
    later = reg.register(me)[0]
    assert later.launch_key
    assert reg.earlier_runs_s(later.launch_key, later.created_ns, clock="run_s") == [30.0]
    assert len(reg.earlier_runs_s(later.launch_key, later.created_ns)) == 1
