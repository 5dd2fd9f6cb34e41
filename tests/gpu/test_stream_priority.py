"""The live shim lever on the H200, gitmd unattended: a job whose critical stream (read back every
step) queues behind another stream's GEMMs. gitmd's attribution finds the starved stream, the shim
learns its handle in a window, and the stream_priority knob raises it in interleaved windows; the
experiment promotes it, and the job's result is the same as an untouched run's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.gpu.test_experiments import CONFIG, W, experiments, job_pid, keep_log, out, stop
from tests.integration.conftest import Daemon, command, free_port


@pytest.mark.timeout(300)
def test_stream_priority_is_promoted_on_a_starved_stream(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    args = ["--seconds", "60"]
    job = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--name", "inversion", "--",
         sys.executable, str(W / "stream_inversion.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        job_pid(d, "inversion")
        deadline = time.monotonic() + 150
        final = None
        while time.monotonic() < deadline and final is None:
            final = next(
                (
                    e
                    for e in experiments(d, "inversion")
                    if e.lever == "stream_priority"
                    and e.state in ("promoted", "reverted", "failed", "abandoned")
                ),
                None,
            )
            time.sleep(1)
        tried = [(e.lever, e.state, e.reason) for e in experiments(d, "inversion")]
        assert final is not None, f"no stream_priority experiment was decided: {tried}"
        out("stream-priority.json", {
            "lever": final.lever, "setting": final.setting_json, "cause": final.cause, "state": final.state,
            "speedup": final.speedup, "ci_low": final.ci_low, "ci_high": final.ci_high, "pairs": final.pairs,
            "reason": final.reason, "arms": [(a.arm, a.window_id, a.step_ms) for a in final.arms],
            "all": tried})  # fmt: skip
        assert final.cause == "stream_starved" and final.state == "promoted", final.reason
        assert final.ci_low >= 1.03
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d.socket), "interventions", "inversion", "--json"],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        ivs = json.loads(r.stdout)["interventions"]
        assert any(i["lever"] == "stream_priority" and i["state"] == "promoted" for i in ivs), ivs
        stdout, _ = job.communicate(timeout=200)
        reference = subprocess.run(  # every step computes the same chain: the loss is its value
            [sys.executable, str(W / "stream_inversion.py"), "--steps", "300"],
            capture_output=True,
            text=True,
            timeout=200,
        )
        assert job.returncode == 0 and reference.returncode == 0
        mine = stdout.splitlines()[-1].split()
        ref = reference.stdout.splitlines()[-1].split()
        out("stream-priority-result.json", {"gitmd": mine, "untouched": ref})
        assert mine[-1] == ref[-1]  # the loss: unchanged by the priority
    finally:
        keep_log(d, "gitmd-stream-priority.log")
        stop(job)
