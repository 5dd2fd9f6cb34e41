"""The fleet library on the H200 (fleet issue): two real daemons, each with its own state, on the
same GPU, sharing a real PostgreSQL started here (Debian's, or the one the carried `pgserver`
wheel bundles: tools/gpu-wheels.sh). On d1 `gitmctl tune` finds TF32 on an fp32 training with its
loss contract, and d1's admin pins the result (a user's tune result is shared only once an admin
pins it); d2 knows it within seconds, and its next `gitmctl run` of the program launches with it:
no live or launch trial (its capture windows, if any, only observe), the run faster than the same
program run plainly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from bench.pgserver import Postgres, available
from tests.gpu.test_experiments import CONFIG, W, experiments, keep_log, out
from tests.gpu.test_tune import tune
from tests.integration.conftest import Daemon, command, ctl, ctl_json, free_port

PROGRAM = [sys.executable, str(W / "mlp_train.py"), "--batch", "4096", "--hidden", "4096", "--steps", "400"]


def step_ms(text: str) -> float:
    found = re.findall(r"step_ms=(\S+)", text)
    assert found, text[-2000:]
    return float(found[-1])


@pytest.mark.timeout(540)
def test_what_one_node_learns_on_the_h200_the_other_launches_with(tmp_path: Path) -> None:
    why = available()
    if why:
        pytest.skip(f"no PostgreSQL on this host: {why}")
    pg = Postgres().init().start()
    daemons: list[Daemon] = []
    try:
        for name in ("d1", "d2"):
            top = Path(tempfile.mkdtemp(prefix=f"gf{name}"))  # short: a Unix socket path
            cfg = top / "gitmd.toml"
            cfg.write_text(
                CONFIG.format(port=free_port())
                + f'\n[fleet]\nurl = "{pg.url}"\nnode = "{name}"\npull_every_s = 1\nsslmode = "disable"\n'
            )
            daemons.append(Daemon(prefix=top / "var", config=cfg).start())
        d1, d2 = daemons
        res = tune(d1, tmp_path, "--levers", "tf32_override", "--metric", r"loss=(\S+)", "--rtol", "1e-2",
                   "--", *PROGRAM)  # fmt: skip
        policy = res["policy"]
        assert policy and policy["env"] == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, res["progress"]
        ctl(d1.socket, "library", "pin", str(policy["id"]))
        t0 = time.monotonic()
        while True:
            listed = ctl_json(d2.socket, "library", "list", "--fleet")["fleet"]
            if listed and listed[0]["state"] == "pinned" and int(listed[0].get("local_policy_id", 0)):
                break
            assert time.monotonic() - t0 < 60, f"d2 never had d1's pin: {listed}"
            time.sleep(0.5)
        lag_s = time.monotonic() - t0
        plain = subprocess.run(PROGRAM, capture_output=True, text=True, cwd=tmp_path, timeout=240)
        assert plain.returncode == 0, plain.stderr[-2000:]
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d2.socket), "run", "--", *PROGRAM],
            capture_output=True, text=True, cwd=tmp_path, timeout=240,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        (job,) = ctl_json(d2.socket, "jobs", "--all")["jobs"]
        result: dict[str, Any] = {
            "tune": {k: res[k] for k in ("policy", "experiments")},
            "pin_to_d2_s": lag_s,
            "plain_step_ms": step_ms(plain.stdout),
            "d2_step_ms": step_ms(r.stdout),
            "d2_job": job,
            "d2_stderr": r.stderr[-2000:],
        }
        result["speedup"] = result["plain_step_ms"] / result["d2_step_ms"]
        out("fleet-h200.json", result)
        assert "launching with its pinned policy" in r.stderr, r.stderr[-2000:]
        # no experiment on d2: the policy at launch, no live trial, no launch trial
        assert int(job["policy_id"]) > 0 and experiments(d2, job["id"]) == [] and not job.get("trial"), job
        assert result["speedup"] > 1.5, json.dumps(result, default=str)[:2000]  # TF32: 4.8x on 12-03
    finally:
        for i, d in enumerate(daemons):
            keep_log(d, f"gitmd-fleet-d{i + 1}.log")
            d.stop()
        pg.remove()
