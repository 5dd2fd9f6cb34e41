"""gitmd's sitecustomize against real PyTorch on the H200: what its knobs report to the launcher's
GITMD_SITE_REPORT file (the evidence a launch trial gives a lever up on: gitmd/loop/trials.py
not_applicable). A program that builds no DataLoader and never empties the cache says only that
PyTorch was adjusted; one that does says which knob changed something; the job's own choices are
no change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitmd.levers.launch_env import SITE_DIR

KNOBS = {"GITMD_DATALOADER_WORKERS": "2", "GITMD_KEEP_CACHE": "1", "GITMD_DATALOADER_PIN_MEMORY": "1"}


def report(tmp_path: Path, code: str, knobs: dict[str, str] = KNOBS) -> list[str]:
    path = tmp_path / "report.txt"
    path.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITMD_")}
    env.update(knobs)
    env["PYTHONPATH"] = f"{SITE_DIR}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(SITE_DIR)
    env["GITMD_SITE_REPORT"] = str(path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return path.read_text().splitlines()


@pytest.mark.timeout(300)
def test_the_site_reports_what_it_changed_in_real_pytorch(tmp_path: Path) -> None:
    x = "import torch\nx = torch.ones(1024, device='cuda')\ntorch.cuda.synchronize()\n"
    assert report(tmp_path, x) == ["site"]  # adjusted, nothing reached
    own = x + "import torch.utils.data as d\nd.DataLoader(list(range(8)), num_workers=0, pin_memory=False)\n"
    assert report(tmp_path, own) == ["site"]  # its own choices stand: no change
    built = x + (
        "import torch.utils.data as d\n"
        "loader = d.DataLoader(list(range(8)), batch_size=4)\n"
        "assert loader.num_workers == 2 and loader.pin_memory\n"
        "for _ in loader: pass\n"
        "torch.cuda.empty_cache()\n"
    )
    got = report(tmp_path, built)
    assert got[0] == "site" and set(got[1:]) == {
        "GITMD_DATALOADER_WORKERS",
        "GITMD_DATALOADER_PIN_MEMORY",
        "GITMD_KEEP_CACHE",
    }, got


@pytest.mark.timeout(300)
def test_cudnn_autotuning_is_said_to_act_only_where_the_job_leaves_it_in_real_pytorch(tmp_path: Path) -> None:
    """GITMD_CUDNN_BENCHMARK against PyTorch's own flag (a ContextProp on torch.backends.cudnn): on
    from the import (PyTorch's C++ side reads it), said to have acted at the exit only where the job
    never set it itself."""
    knobs = {"GITMD_CUDNN_BENCHMARK": "1"}
    conv = (
        "import torch\n"
        "assert torch._C._get_cudnn_benchmark() is {want}\n"
        "c = torch.nn.Conv2d(8, 8, 3).cuda()\n"
        "c(torch.randn(4, 8, 32, 32, device='cuda')).sum().item()\n"
    )
    assert report(tmp_path, conv.format(want=True), knobs) == ["site", "GITMD_CUDNN_BENCHMARK"]
    own = "import torch\ntorch.backends.cudnn.benchmark = True\n" + conv.format(want=True)
    assert report(tmp_path, own, knobs) == ["site"]  # its own choice: no change of gitmd's
    off = "import torch\ntorch.backends.cudnn.benchmark = False\n" + conv.format(want=False)
    assert report(tmp_path, off, knobs) == ["site"]  # its choice stands
