"""A torchrun worker's rank shows in its job's view: its ring found, its launcher's variables read
from its environment at exec (gitmd/capture/ranks.py), the view and the API message carry it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gitmd.api import convert
from gitmd.capture.ranks import Rank
from gitmd.jobs.registry import Registration
from tests.unit.loop.helpers import make_service

WORKER = r"""
import mmap, os, sys, time
from pathlib import Path
data = bytearray(Path(sys.argv[1]).read_bytes())
data[40:44] = os.getpid().to_bytes(4, "little")
stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
data[48:56] = int(stat[19]).to_bytes(8, "little")
path = Path(sys.argv[2])
path.write_bytes(bytes(data))
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)  # as the shim maps its ring: gitmd trusts the pid then
print("ready", flush=True)
sys.stdin.read()
"""


def test_each_workers_rank_is_in_the_jobs_view(tmp_path: Path, write_ring: Callable[..., Path]) -> None:
    svc = make_service(tmp_path)
    view, plan = svc.register_job(
        Registration("ddp", ("torchrun", "train.py"), "/", os.getuid(), os.getgid())
    )
    job_dir = Path(plan.env["GITM_JOB_DIR"])
    workers = []
    try:
        for rank in (1, 0):
            template = write_ring(10 + rank, 64)
            w = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(template), str(job_dir / f"ring-{rank}-1.gitm")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env={**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"},
            )  # fmt: skip
            workers.append(w)
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        got = svc.get_job(view.job.id)
        while len(got.processes) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            got = svc.get_job(view.job.id)
        pids = {w.pid: int(Path(w.args[-1]).name.split("-")[1]) for w in workers}  # pid -> its rank
        assert {st.pid for st, _ in got.processes} == set(pids)
        assert got.ranks == {pid: Rank(r, r, 2) for pid, r in pids.items()}
        msg = convert.job_to_pb(got)
        assert sorted((p.rank, p.world_size) for p in msg.processes) == [(0, 2), (1, 2)]
    finally:
        for w in workers:
            assert w.stdin is not None
            w.stdin.close()
            w.wait(10)
