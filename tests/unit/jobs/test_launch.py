"""Launch plans (gitmd/jobs/launch.py): what a run gets for the shim, and for a run that goes
without it, gitmd's clock library in its place."""

from __future__ import annotations

from pathlib import Path

from gitmd.jobs.launch import CLOCK_PLAN_VAR, SHIM_ENV, build_plan, clock_env


def _plan(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "libgitm_shim.so"
    shim.write_bytes(b"\x7fELF")
    (tmp_path / "libgitm_guard.so").write_bytes(b"\x7fELF")
    plan = build_plan("j1", tmp_path / "jobs" / "j1", shim, 4096, [], detach_cupti=True)
    assert plan.capture and plan.env["CUDA_INJECTION64_PATH"] == str(shim) and "GITM_GUARD" in plan.env
    return {**plan.env, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}


def test_a_run_without_the_shim_gets_the_clock_library_in_its_place(tmp_path: Path) -> None:
    env = _plan(tmp_path)
    (tmp_path / "libgitm_clock.so").write_bytes(b"\x7fELF")
    out = clock_env(env)
    assert out["CUDA_INJECTION64_PATH"] == str(tmp_path / "libgitm_clock.so") and out[CLOCK_PLAN_VAR] == "1"
    assert set(out) & set(SHIM_ENV) == {"CUDA_INJECTION64_PATH", CLOCK_PLAN_VAR}  # nothing else of the shim's
    assert out["GITM_JOB_ID"] == "j1" and out["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "1"  # the policy stays


def test_without_the_clock_library_installed_the_run_gets_no_injection(tmp_path: Path) -> None:
    out = clock_env(_plan(tmp_path))
    assert not set(out) & set(SHIM_ENV) and out["GITM_JOB_ID"] == "j1"
    assert clock_env({"GITM_JOB_ID": "j2"}) == {"GITM_JOB_ID": "j2"}  # a plan with no shim at all
