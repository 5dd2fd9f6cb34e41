"""Host-side live shim levers on the H200: pin_host_buffer (hot pageable buffers found from a real
capture, page-locked through the shim, unregistered by the free guard when the program frees them)
and mempool_release (the default pool's release threshold, set, read back and restored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitmd.analysis.hostbuffers import hot_pageable_buffers, to_pin
from gitmd.capture import capture_file
from gitmd.levers.base import Target
from gitmd.levers.registry import make
from tests.gpu.test_experiments import CONFIG, job_pid, keep_log, out, stop
from tests.integration.conftest import Daemon, command, free_port

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _result(stdout: str) -> dict[str, str]:
    line = next(s for s in reversed(stdout.splitlines()) if s.startswith("result "))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


@pytest.mark.timeout(300)
def test_hot_buffers_are_pinned_and_unregistered_before_the_program_frees_them(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    go = tmp_path / "go"
    job = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--no-explore", "--name", "churn", "--",
         sys.executable, str(PROGRAMS / "pinned_churn.py"), str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    record: dict[str, Any] = {}
    try:
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "ready"
        pid = job_pid(d, "churn")
        raw = tmp_path / "w.npz"
        r = subprocess.run(
            [*command("gitmctl"), "--socket", str(d.socket), "trace", "churn", "--duration", "1", "--raw",
             "-o", str(raw)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        window = capture_file.loads(raw)
        proc = next(p for p in window.processes if p.pid == pid)
        hot = hot_pageable_buffers(proc.records)
        pin = to_pin(hot)
        h, m = proc.records.hostsrcs, proc.records.memcpys
        record["window"] = {
            "hostsrcs": len(h), "cbids": sorted({int(c) for c in h["cbid"]}),
            "flags": sorted({int(f) for f in h["flags"]}), "memcpys": len(m),
            "pageable_htod": int(((m["copy_kind"] == 1) & (m["src_kind"] == 1)).sum()),
        }  # fmt: skip
        record["hot"] = [(hex(b.address), b.bytes, b.copies, b.pageable_ns, b.waited) for b in hot]
        assert len(pin) == 2 and all(b.bytes == 64 << 20 for b in pin), record

        mine = [p for p in _rings(d, "churn") if p.name.startswith(f"ring-{pid}-")]
        assert mine, "no ring for the job's process"
        rings = {pid: str(mine[0])}
        target = Target(job_id="churn", pids=(pid,), rings=rings, owner_uid=os.getuid())

        # mempool_release: set, read back, restored to what the process had
        pool = make("mempool_release", pid=pid, device=0, bytes=1 << 30)
        saved_pool = pool.capture(target)
        pool.apply(target)
        pool.verify(target)
        pool.revert(target, saved_pool)
        assert pool.capture(target) == saved_pool
        record["mempool"] = saved_pool

        lever = make("pin_host_buffer", pid=pid, buffers=[[b.address, b.bytes] for b in pin])
        saved = lever.capture(target)
        assert saved == {"registered": []}
        lever.apply(target)
        lever.verify(target)
        go.touch()  # phase B: faster copies, then the program frees and replaces its batches
        stdout, stderr = job.communicate(timeout=120)
        assert job.returncode == 0, stderr[-3000:]
        res = _result(stdout)
        record["result"] = res
        # every copy held its batch's data, also after the program freed page-locked batches
        assert res["mismatches"] == "0" and res["fork"] == "ok", res
        assert float(res["b_ms"]) < float(res["a_ms"]) / 1.5, res  # pinned copies ran faster

        unguarded = subprocess.run(
            [sys.executable, str(PROGRAMS / "pinned_churn.py"), str(go), "--register-unguarded"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        record["unguarded"] = (
            _result(unguarded.stdout) if unguarded.returncode == 0 else unguarded.stderr[-2000:]
        )
    finally:
        out("pin-host-buffer.json", record)
        keep_log(d, "gitmd-pin-host-buffer.log")
        stop(job)


def _rings(d: Daemon, name: str) -> list[Path]:
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "job", name, "--json"],
        capture_output=True,
        text=True,
    )
    runtime = Path(json.loads(r.stdout)["runtime_dir"])
    return sorted(runtime.glob("ring-*.gitm"))


@pytest.mark.timeout(60)
def test_the_job_process_had_the_guard_preloaded(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--", sys.executable, "-c",
         "import os; print(os.environ.get('LD_PRELOAD', ''))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout.split(":")[0].strip().endswith("libgitm_guard.so"), r.stdout
