"""cotenant_yield on the H200, gitmd unattended: a training job shares its GPU with a background
job (registered `--background`) running bf16 GEMMs. Attribution finds `cotenant`; gitmd holds the
background job's launches for part of each period through its shim in interleaved windows; the
experiment promotes it; when the foreground job ends, the yield lifts (reverted, and the shim's own
expiry would lift it anyway). H200, 2026-12-02: promoted 1.61x (2.06 -> 1.26 ms/step), 750 read back
while training, 0 after (bench/results/2026-12-02-kineto-cotenant-h200.md)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from gitmd.capture.ring import Ring
from tests.gpu.test_experiments import CONFIG, W, decided, job_pid, keep_log, out
from tests.gpu.test_pin_host_buffer import _rings
from tests.integration.conftest import Daemon, command, free_port


@pytest.mark.timeout(400)
def test_a_background_cotenant_yields_to_the_training_job(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    hog = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--background", "--no-explore",
         "--name", "hog", "--", sys.executable, str(W / "cotenant_hog.py"), "--seconds", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    job = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--name", "train", "--",
         sys.executable, str(W / "mlp_train.py"), "--batch", "1024", "--seconds", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    record: dict[str, Any] = {}
    try:
        hog_pid = job_pid(d, "hog")
        job_pid(d, "train")
        final = decided(d, "train", "cotenant_yield", record, 150)
        assert final is not None, f"no cotenant_yield experiment was decided: {record['tried']}"
        assert final.cause == "cotenant" and final.state == "promoted", final.reason
        ring = Ring(str(next(p for p in _rings(d, "hog") if p.name.startswith(f"ring-{hog_pid}-"))))
        try:
            op = ring.abi.const("GITM_KNOB_YIELD")
            rc, got = ring.knob(op, (0, 0, 0, 1))
            record["yield_while_training"] = got
            assert rc == 0 and got[1] == 750  # the background job yields while the job trains
            job.send_signal(signal.SIGTERM)
            job.wait(60)
            lifted = time.monotonic() + 40
            while ring.knob(op, (0, 0, 0, 1))[1][1] and time.monotonic() < lifted:
                time.sleep(1)
            record["yield_after"] = ring.knob(op, (0, 0, 0, 1))[1]
            assert record["yield_after"][1] == 0  # the job it yielded to ended: lifted
        finally:
            ring.close()
        assert hog.poll() is None  # the background job ran on, slower while it yielded
    finally:
        out("cotenant-yield.json", record)
        keep_log(d, "gitmd-cotenant-yield.log")
        for p in (job, hog):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(60)
