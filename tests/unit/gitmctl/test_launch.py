"""What a launcher does with a plan, on gitmctl's side of the API: the plan's environment added to
its own, gitmd's site directory first on PYTHONPATH and the free guard first on LD_PRELOAD."""

from __future__ import annotations

from gitmctl.launch import is_number, job_environment


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
