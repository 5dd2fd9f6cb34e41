"""What a launcher does with a plan, on gitmctl's side of the API: the plan's environment added to
its own, gitmd's site directory first on PYTHONPATH and the free guard first on LD_PRELOAD."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gitmctl.launch import (
    CLOCK_FILE_VAR,
    CLOCK_PLAN_VAR,
    INJECTION_VAR,
    SITE_REPORT_VAR,
    clock_file,
    is_number,
    job_environment,
    process_age_s,
    read_clock,
    read_site_report,
    site_report_file,
)


def test_the_plan_is_added_and_paths_go_first() -> None:
    site = {"GITMD_CUDNN_BENCHMARK": "1", "GITM_SITE": "/usr/lib/gitmd/site"}
    assert job_environment({}, site)["PYTHONPATH"] == "/usr/lib/gitmd/site"
    env = job_environment({"PYTHONPATH": "/opt/lib", "HOME": "/h"}, site)
    assert env["PYTHONPATH"] == "/usr/lib/gitmd/site:/opt/lib" and env["HOME"] == "/h"
    assert env["GITMD_CUDNN_BENCHMARK"] == "1"
    assert job_environment({"PYTHONPATH": "/opt/lib"}, {"OMP_NUM_THREADS": "4"})["PYTHONPATH"] == "/opt/lib"
    guard = {"GITM_GUARD": "/usr/lib/gitmd/libgitm_guard.so"}
    assert job_environment({}, guard)["LD_PRELOAD"] == "/usr/lib/gitmd/libgitm_guard.so"
    both = job_environment({"LD_PRELOAD": "/opt/libjemalloc.so"}, guard)["LD_PRELOAD"]
    assert both == "/usr/lib/gitmd/libgitm_guard.so:/opt/libjemalloc.so"
    assert "LD_PRELOAD" not in job_environment({}, {"GITM_JOB_ID": "x"})
    assert job_environment({"A": "1"}, {"A": "2"})["A"] == "2"  # the plan wins


def test_the_same_environment_as_the_daemons_own_launcher() -> None:
    """gitmd's job_environment (bench and daemon side) and gitmctl's agree on a plan that already
    names GITM_SITE, as every plan and every ListLevers environment does."""
    from gitmd.levers.launch_env import job_environment as daemons
    from gitmd.levers.launch_env import with_site

    base = {"PYTHONPATH": "/opt/lib", "LD_PRELOAD": "/x.so", "PATH": "/bin"}
    for plan in ({"GITMD_KEEP_CACHE": "1"}, {"OMP_NUM_THREADS": "4", "GITM_GUARD": "/g.so"}, {}):
        assert job_environment(base, with_site(plan)) == daemons(base, plan)


def test_numbers() -> None:
    assert is_number("1.5") and is_number("-2e-3") and is_number("nan") and is_number(" 7 ")
    assert not is_number("") and not is_number("1.2.3") and not is_number("x")


def test_the_site_report_file_is_made_only_for_a_plan_with_the_site_and_read_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan holding a framework knob (GITM_SITE) gets a private file named in GITMD_SITE_REPORT;
    reading it back gives whether the site adjusted PyTorch and the knobs that acted (plain GITMD_*
    names only, each once, at most 16), and removes it. Unknown — (False, []) — when it is gone,
    not a plain file, or too long to hold every line; a launcher inside another job's leaves the
    outer launcher's file alone."""
    monkeypatch.delenv(SITE_REPORT_VAR, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    plain = {"OMP_NUM_THREADS": "4"}
    env = dict(plain)
    assert site_report_file(env, plain) == "" and SITE_REPORT_VAR not in env
    plan = {"GITM_SITE": "/usr/lib/gitmd/site", "GITMD_DATALOADER_WORKERS": "4"}
    env = dict(plan)
    path = site_report_file(env, plan)
    assert path and env[SITE_REPORT_VAR] == path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "a") as f:  # as the job's processes append: two of them, and noise
        f.write("site\nGITMD_DATALOADER_WORKERS\nsite\nGITMD_DATALOADER_WORKERS\nPATH\nGITMD_x;rm\n")
    assert read_site_report(path) == (True, ["GITMD_DATALOADER_WORKERS"])
    assert not os.path.exists(path)
    assert read_site_report(path) == (False, [])  # gone (or never written): nothing known
    many = tmp_path / "many.txt"
    many.write_text("".join(f"GITMD_K{i}\n" for i in range(40)))
    loaded, acted = read_site_report(str(many))
    assert not loaded and len(acted) == 16
    # thousands of processes said "site" before the one whose knob acted: too long, unknown
    long = tmp_path / "long.txt"
    long.write_text("site\n" * 20000 + "GITMD_DATALOADER_WORKERS\n")
    assert read_site_report(str(long)) == (False, [])
    # the job replaced the file with a pipe nobody writes, or a link: never waited on, never followed
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_site_report(str(fifo)) == (False, []) and not fifo.exists()
    target = tmp_path / "target.txt"
    target.write_text("site\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_site_report(str(link)) == (False, []) and target.exists()
    # a gitmctl run inside another job's: the outer launcher's file stays the one named
    monkeypatch.setenv(SITE_REPORT_VAR, "/tmp/outer.txt")
    env = {**plan, SITE_REPORT_VAR: "/tmp/outer.txt"}
    assert site_report_file(env, plan) == "" and env[SITE_REPORT_VAR] == "/tmp/outer.txt"


def test_the_launchers_site_report_bounds_are_the_daemons() -> None:
    """gitmctl reads back only what gitmd accepts (it refuses a report outside these bounds): one
    regex and one count, kept apart so that gitmctl run imports no lever code."""
    from gitmctl import launch
    from gitmd.levers import launch_env

    assert launch.MAX_ACTED == launch_env.MAX_ACTED
    assert launch._KNOB.pattern == launch_env.KNOB_NAME.pattern


CLOCK_PLAN = {INJECTION_VAR: "/usr/lib/gitmd/libgitm_clock.so", CLOCK_PLAN_VAR: "1", "GITM_JOB_ID": "j"}


def test_the_clock_file_is_made_only_for_a_plan_with_the_clock_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan with gitmd's clock library (GITM_CLOCK) gets a private file named in GITMD_CLOCK_FILE,
    and GITM_CLOCK itself is not passed on; a plan with the shim, or none, gets nothing; a launcher
    inside another job's leaves the outer one's file alone."""
    monkeypatch.delenv(CLOCK_FILE_VAR, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    shim = {INJECTION_VAR: "/usr/lib/gitmd/libgitm_shim.so", "GITM_JOB_DIR": "/run/gitmd/jobs/j"}
    env = dict(shim)
    assert clock_file(env, shim, {}) == "" and CLOCK_FILE_VAR not in env
    env = job_environment({}, CLOCK_PLAN)
    path = clock_file(env, CLOCK_PLAN, {})
    assert path and env[CLOCK_FILE_VAR] == path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert CLOCK_PLAN_VAR not in env and env[INJECTION_VAR] == CLOCK_PLAN[INJECTION_VAR]
    os.unlink(path)
    monkeypatch.setenv(CLOCK_FILE_VAR, "/tmp/outer.txt")
    env = {**job_environment({}, CLOCK_PLAN), CLOCK_FILE_VAR: "/tmp/outer.txt"}
    assert clock_file(env, CLOCK_PLAN, {}) == "" and env[CLOCK_FILE_VAR] == "/tmp/outer.txt"


def test_the_clock_never_displaces_the_users_own_injection_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user who runs their own CUDA injection library (a profiler, a tool) keeps it: the clock is
    gitmd's convenience, not worth a tool of theirs; the run is then timed by its launcher alone."""
    monkeypatch.delenv(CLOCK_FILE_VAR, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    base = {INJECTION_VAR: "/opt/tool/libinject.so"}
    env = job_environment(base, CLOCK_PLAN)
    assert clock_file(env, CLOCK_PLAN, base) == ""
    assert env[INJECTION_VAR] == "/opt/tool/libinject.so" and CLOCK_FILE_VAR not in env
    assert not list(tmp_path.iterdir())


def test_the_run_is_timed_from_its_first_stamp_within_its_exec_and_exit(tmp_path: Path) -> None:
    """The earliest stamp between the launcher's exec and its child's exit, to that exit; lines
    that are no stamp of this run's (before exec, after exit, not a stamp) are ignored. Unknown
    (None) when no process stamped (no CUDA), or the file is not the launcher's own."""
    f = tmp_path / "clock.txt"
    f.write_text("cuda 11 5000000000\ncuda 12 3500000000\ncuda 13 900\njunk\ncuda x 4\ncuda 14 99000000000\n")
    assert read_clock(str(f), 1_000_000_000, 10_000_000_000) == pytest.approx(6.5)
    assert not f.exists()  # read once, removed
    f.write_text("")
    assert read_clock(str(f), 0, 10) is None  # no process initialised CUDA
    assert read_clock(str(f), 0, 10) is None  # gone
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_clock(str(fifo), 0, 10**12) is None and not fifo.exists()
    target = tmp_path / "target.txt"
    target.write_text("cuda 1 5\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_clock(str(link), 0, 10) is None and target.exists()
    huge = tmp_path / "huge.txt"
    huge.write_text("cuda 1 5\n" * 10000)
    assert read_clock(str(huge), 0, 10) is None  # longer than any job's processes write: unknown


def test_the_launchers_age_is_read_from_its_start_in_proc_stat() -> None:
    """process_age_s: field 22 of /proc/self/stat (ticks since boot) against CLOCK_BOOTTIME; a
    command name holding ") " does not shift the fields; unreadable text is None, never a guess."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(50 * tick)] + ["0"] * 30
    text = "123 (a) b) " + " ".join(fields)
    assert process_age_s(text, 52.5) == 2.5
    assert process_age_s(text, 49.0) is None  # a start after now: not this process
    assert process_age_s("garbage", 1.0) is None
    age = process_age_s()
    assert age is not None and 0 <= age < 86400  # this test process's own, read from /proc
