"""On the GPU host: gitmd with the NVML backend shows the real card and a running torch process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.integration.conftest import ctl, ctl_json, free_port

NVML_CONFIG = """
[telemetry]
backend = "nvml"
interval_s = 1.0
[metrics]
port = {port}
"""

TORCH_JOB = textwrap.dedent(
    """
    import sys, time, torch
    x = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        for _ in range(20):
            x = torch.tanh(x @ x * 1e-4)
        torch.cuda.synchronize()
    print("done", flush=True)
    """
)


def save(name: str, text: str) -> None:
    out = os.environ.get("GITMD_GPU_OUT")
    if out:
        Path(out, name).write_text(text)


def test_real_card_and_a_torch_process(daemon_factory: Any) -> None:
    d = daemon_factory(config_text=NVML_CONFIG.format(port=free_port()))
    gpus = ctl_json(d.socket, "gpus")
    save("gpus.json", json.dumps(gpus, indent=2))
    assert gpus["backend"] == "nvml"
    g0 = gpus["gpus"][0]
    assert g0["vendor"] == "nvidia" and g0["uuid"].startswith("GPU-")
    assert g0["sm_clock_max_mhz"] > 0 and g0["power_limit_mw"] > 0
    assert int(g0["memory_total_bytes"]) > 10 * 2**30

    job = subprocess.Popen([sys.executable, "-c", TORCH_JOB, "25"], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        sample: dict[str, Any] = {}
        while time.monotonic() < deadline:
            time.sleep(1.5)
            latest = ctl_json(d.socket, "telemetry", "--gpu", "0")
            sample = latest["samples"][0]
            pids = [p["pid"] for p in sample["processes"]]
            if job.pid in pids and sample.get("utilization_gpu_pct", 0) > 0:
                break
        save("telemetry-with-torch.json", json.dumps(latest, indent=2))
        save("telemetry-with-torch.txt", ctl(d.socket, "telemetry").stdout)
        assert job.pid in [p["pid"] for p in sample["processes"]], sample
        proc = next(p for p in sample["processes"] if p["pid"] == job.pid)
        assert proc["name"].startswith("python")
        assert sample["utilization_gpu_pct"] > 0
        assert sample["sm_clock_mhz"] > 0 and sample["mem_clock_mhz"] > 0
        assert sample["power_mw"] > 0 and sample["temperature_c"] > 0
        assert int(sample["memory_used_bytes"]) > 256 * 2**20
        assert "clock_event_reasons" in sample
        assert not [e for e in sample["errors"] if e["field"] == "clock_event_reasons"], sample["errors"]
        save("errors.json", json.dumps(sample["errors"], indent=2))
    finally:
        job.kill()
        job.wait()
    history = ctl_json(d.socket, "telemetry", "--gpu", "0", "--since", "2m")["samples"]
    assert len(history) >= 5
    save("status.json", json.dumps(ctl_json(d.socket, "status"), indent=2))
    assert d.stop() == 0
