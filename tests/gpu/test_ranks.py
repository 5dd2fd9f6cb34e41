"""On the GPU host: a torchrun job is one gitmd job (issue 29, the single-GPU part). Two DDP ranks
share GPU 0 through gloo; `gitmctl job` shows both processes with their rank and GPU, and one capture
window holds both ranks' kernels."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gitmd.capture import capture_file
from tests.gpu.test_capture import (
    CONFIG,
    PROGRAMS,
    save_fixture,
    start_job,
    traced,
    wait_gpus,
    wait_processes,
)
from tests.integration.conftest import ROOT, Daemon, free_port


@pytest.mark.timeout(300)
def test_a_torchrun_jobs_ranks_are_one_job(daemon_factory: Any, short_tmp: Path) -> None:
    if not (ROOT / "shim" / "build" / "libgitm_shim.so").exists():
        pytest.skip("the shim is not built")
    d: Daemon = daemon_factory(config_text=CONFIG.format(port=free_port()))
    stop = short_tmp / "stop"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(PROGRAMS / "ddp_gloo.py"), str(stop)]  # fmt: skip
    job = start_job(d, "ddp", argv)
    try:
        assert job.stdout is not None
        ready = sorted(job.stdout.readline().split() for _ in range(2))
        assert [r[0:2] for r in ready] == [["ready", "0"], ["ready", "1"]], ready
        pids = {int(r[2]): int(r[1]) for r in ready}  # pid -> rank
        view = wait_gpus(d, "ddp", wait_processes(d, "ddp", 2))
        by_pid = {int(p["pid"]): p for p in view["processes"]}
        assert set(pids) <= set(by_pid), view["processes"]  # torchrun's own process has no ring
        for pid, rank in pids.items():
            p = by_pid[pid]
            assert (p.get("rank"), p.get("world_size"), p["gpus"]) == (rank, 2, [0]), p
        cap = short_tmp / "ddp.npz"
        t, result = traced(d, "ddp", 2.0, cap)
        t.join(120)
        assert result.get("rc") == 0, result
        w = capture_file.loads(cap)
        kernels = {p.pid: len(p.records.kernels) for p in w.processes}
        assert all(kernels.get(pid, 0) > 0 for pid in pids), (kernels, w.notes)  # one window, both ranks
        save_fixture(cap, "capture-ddp-gloo-2ranks.npz")
        # the window's analysis: both ranks step together (a straggler or none, whichever it was)
        from gitmd.analysis.report import window_report

        rep = window_report(w, tester=None)
        assert sorted(r.pid for r in rep.ranks) == sorted(pids), (rep.ranks, pids)
        assert rep.straggler is None or rep.cause_pid == rep.straggler.pid
    finally:
        stop.touch()
        out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-3000:]
    done = sorted(line.split() for line in out.splitlines() if line.startswith("done"))
    assert [x[1] for x in done] == ["0", "1"] and done[0][2] == done[1][2], done  # same steps on both
