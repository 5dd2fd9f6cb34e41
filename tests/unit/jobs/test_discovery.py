"""GPU processes no job accounts for (gitmd/jobs/discovery.py): a run gitmd launched without the
shim (the observation backoff's resting runs) is its job's, not an untracked process to relaunch."""

from __future__ import annotations

import os
import subprocess
import sys

from gitmd.jobs.discovery import shimless_job_of, untracked
from gitmd.records import GpuProcess, GpuSample


def test_a_run_without_the_shim_is_its_jobs_not_untracked() -> None:
    env = {**os.environ, "GITM_JOB_ID": "0123456789ab"}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = {"0123456789ab": os.getuid()}
        assert shimless_job_of(p.pid, mine) == "0123456789ab"
        # the environment is the user's to write: another uid's job is not claimed by it
        assert shimless_job_of(p.pid, {"0123456789ab": os.getuid() + 1}) == ""
        assert shimless_job_of(p.pid, {"other": os.getuid()}) == "" and shimless_job_of(plain.pid, mine) == ""
        sample = GpuSample(0, "GPU-x", 0, processes=(GpuProcess(p.pid), GpuProcess(plain.pid)))
        assert [u.pid for u in untracked([sample], set(), os.getpid(), mine)] == [plain.pid]
        (u, _) = untracked([sample], set(), os.getpid())  # without the job: its process is shown
        assert u.pid == p.pid and "launched through gitmd" in u.reason
    finally:
        for x in (p, plain):
            x.kill()
            x.wait()
