"""`gitmctl tune` on the H200 with unmodified workloads, gitmd choosing the levers from its
attribution of the reference run (``--only-causes``) or trying the ones named:
(a) fp32 MLP training (GEMM-bound size): fp32_gemm -> TF32 promoted, the loss contract holding (rtol 1e-2);
(b) allocator churn: the allocator levers tried, each kept only if its interval clears min_gain;
(d) bf16 matmuls at their ceiling: the levers tried, nothing promoted.
Each decision's figures are written to GITMD_GPU_OUT."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.test_experiments import CONFIG, W, keep_log, out
from tests.integration.conftest import Daemon, command, free_port

TIME = r"step_ms=(\S+)"


def tune(d: Daemon, cwd: Path, *args: str) -> dict[str, Any]:
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "--timeout", "60", "tune", "--json", "--time", TIME,
         *args],
        capture_output=True, text=True, cwd=cwd, timeout=280,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    res["progress"] = r.stderr.splitlines()
    return res  # type: ignore[no-any-return]


def decided_right(e: dict[str, Any]) -> bool:
    """Promoted exactly when the interval cleared 3% (and the outputs held: the reason says)."""
    cleared = e.get("ci_low", 0) >= 1.03 and "outputs changed" not in e["reason"]
    return (e["state"] == "promoted") == cleared


@pytest.fixture
def d(daemon_factory: Any) -> Daemon:
    return daemon_factory(config_text=CONFIG.format(port=free_port()))  # type: ignore[no-any-return]


@pytest.mark.timeout(300)
def test_a_fp32_training_gets_tf32_with_its_loss_contract(d: Daemon, tmp_path: Path) -> None:
    try:
        res = tune(d, tmp_path, "--only-causes", "--metric", r"loss=(\S+)", "--rtol", "1e-2", "--",
                   sys.executable, str(W / "mlp_train.py"), "--batch", "4096", "--hidden", "4096",
                   "--steps", "600")  # fmt: skip
        out("tune-a-tf32.json", res)
        by = {e["lever"]: e for e in res["experiments"]}
        assert "tf32_override" in by, res["progress"]
        assert by["tf32_override"]["state"] == "promoted", by["tf32_override"]["reason"]
        assert res["policy"]["env"] == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    finally:
        keep_log(d, "gitmd-tune-a.log")


@pytest.mark.timeout(300)
def test_b_allocator_churn_levers_kept_only_when_faster(d: Daemon, tmp_path: Path) -> None:
    try:
        res = tune(d, tmp_path, "--levers", "alloc_expandable_segments,alloc_gc_threshold",
                   "--metric", r"checksum=(\S+)", "--", sys.executable, str(W / "alloc_churn.py"),
                   "--steps", "400")  # fmt: skip
        out("tune-b-alloc.json", res)
        by = {e["lever"]: e for e in res["experiments"]}
        assert "alloc_expandable_segments" in by, res["progress"]
        assert all(decided_right(e) for e in by.values()), by
    finally:
        keep_log(d, "gitmd-tune-b.log")


@pytest.mark.timeout(300)
def test_d_a_program_at_its_ceiling_gets_nothing(d: Daemon, tmp_path: Path) -> None:
    try:
        res = tune(d, tmp_path, "--levers", "cuda_device_max_connections,alloc_expandable_segments",
                   "--metric", r"checksum=(\S+)", "--", sys.executable, str(W / "matmul_bf16.py"),
                   "--steps", "400")  # fmt: skip
        out("tune-d-ceiling.json", res)
        assert len(res["experiments"]) == 2, res["progress"]
        assert all(e["state"] == "reverted" for e in res["experiments"]), res["experiments"]
        assert "policy" not in res
    finally:
        keep_log(d, "gitmd-tune-d.log")
