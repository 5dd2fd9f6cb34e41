"""What the loop's tests share: the service facade wired to real parts (simulated GPUs, a real
store, real ring files), rings that name a living process, a recurring workload and its runs."""

from __future__ import annotations

import dataclasses
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gitmd.capture import abi
from gitmd.capture.windows import CaptureManager
from gitmd.config import CaptureConfig, Config, SimConfig
from gitmd.experiments.equivalence import Contract
from gitmd.jobs.liveness import ProcessWatcher
from gitmd.jobs.registry import JobRegistry, Registration
from gitmd.levers.launch_env import SiteReport
from gitmd.loop.state import LivePending
from gitmd.service import Service
from gitmd.store.db import Store
from gitmd.store.library import Library
from gitmd.store.telemetry import TelemetryStore
from gitmd.telemetry.sampler import Sampler
from gitmd.telemetry.sim import SimBackend

PLANTED = Path(__file__).resolve().parents[2] / "fixtures" / "planted"  # real H200 windows


def make_service(tmp_path: Path, gpus: int = 1) -> Service:
    shim = tmp_path / "libgitm_shim.so"
    shim.write_bytes(b"\x7fELF")
    cfg = Config(capture=CaptureConfig(shim_path=shim), sim=SimConfig(gpus=gpus))
    store = Store(tmp_path / "g.db")
    backend = SimBackend(cfg.sim)
    backend.open()
    telemetry = TelemetryStore(store)
    return Service(
        cfg,
        backend,
        Sampler(backend, telemetry, 1.0),
        telemetry,
        JobRegistry(store, tmp_path / "run", cfg.capture),
        CaptureManager(abi.load(), cfg.capture.kinds, 250, ProcessWatcher()),
        Library(store),
    )


def set_config(svc: Service, cfg: Config) -> None:
    """The service's configuration replaced, as the loop's stages see it too (Deps holds it)."""
    svc.config = svc.loop.d.config = cfg


def pending(svc: Service, job_id: str) -> LivePending:
    """The job's live policy still to apply (it must have one)."""
    live = svc.states.of(job_id).live
    assert live is not None
    return live


MAPPINGS: list[mmap.mmap] = []  # this process maps the rings that name it, as the shim would


def live_ring(job_dir: str, write_ring: Callable[..., Path], age_s: float | None = None) -> None:
    """A ring in the job's directory whose header names this (living) test process, mapped by it
    (gitmd trusts a ring's pid only when that process maps the file); ``age_s``: the process's age as
    the ring states it (a first run's first window waits until it is settle_s)."""
    data = bytearray(write_ring(10, 64).read_bytes())
    data[40:44] = os.getpid().to_bytes(4, "little")
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    if age_s is not None:
        data[56:64] = (time.time_ns() - int(age_s * 1e9)).to_bytes(8, "little")  # created_real_ns
    path = Path(job_dir) / "ring-1-1.gitm"
    path.write_bytes(bytes(data))
    with open(path, "r+b") as f:
        MAPPINGS.append(mmap.mmap(f.fileno(), 0))


def recurring(svc: Service, key: str) -> str:
    """A workload the library knows, launched under ``key`` by this test's user (launch keys are
    bound to their user: gitmd.jobs.launch_key.owned): its next launch is recurring."""
    import json as _json

    from gitmd.jobs.launch_key import owned

    doc = {
        "format": "gitm-library",
        "version": 1,
        "workloads": [
            {
                "id": "00c0ffee0003",
                "name": "train",
                "signature": {"sequence": ["sgemm"], "shares": {"sgemm": 1.0}},
                "first_seen_ns": 1,
                "last_seen_ns": 2,
                "run_count": 1,
                "launch_keys": [owned(os.getuid(), key)],
                "policies": [],
            }
        ],
    }
    svc.import_library(_json.dumps(doc).encode())
    return "00c0ffee0003"


def run_train(
    svc: Service,
    contract: object,
    run_s: float | None,
    loss: float,
    exit_code: int = 0,
    args: tuple[str, ...] = (),
    site: SiteReport | None = None,
) -> tuple[str, str, dict[str, str]]:
    """A run of the recurring "train" program (``args``: its command line's arguments), from
    registration to its reported exit (``site``: what gitmd's sitecustomize did in it, as its
    launcher reports): its id, its launch trial's arm ("-": none) and its environment."""
    assert isinstance(contract, Contract)
    command = ("python", "train.py", *args)
    reg = Registration("train", command, "/srv", os.getuid(), os.getgid(), launch_key="train")
    view, plan = svc.register_job(replace_reg(reg, contract=contract))
    # the run's length by its own clock, as its rings and their exits give it (a GPU job's; none here)
    svc.loop.exits.run_s = lambda job_id: run_s  # type: ignore[method-assign]
    svc.report_exit(view.job.id, exit_code, {r"loss=(\S+)": [loss]}, None, site)
    arm = plan.trial.split("arm ")[1][0] if plan.trial else "-"
    return view.job.id, arm, plan.env


def replace_reg(obj: Registration, **kw: object) -> Registration:
    return dataclasses.replace(obj, **kw)  # type: ignore[arg-type]


def service_with_policy(tmp_path: Path, live: list[dict[str, object]]) -> Service:
    svc = make_service(tmp_path)
    wid = recurring(svc, "train")
    svc.library.add_policy(wid, {}, "validated", 2.0, (1.5, 2.5), {"source": "live"}, live=live)
    return svc


# A process standing for a job's: it maps its ring, as the shim does, once the ring appears (gitmd
# trusts a ring's pid only when that process maps the file), then idles.
_MAPPER = """
import mmap, os, sys, time
path = os.path.join(sys.argv[1], f"ring-{os.getpid()}-1.gitm")
while not os.path.exists(path):
    time.sleep(0.01)
m = mmap.mmap(os.open(path, os.O_RDWR), 0)
time.sleep(60)
"""


def mapping_child(job_dir: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _MAPPER, job_dir])


def ring_for(write_ring: Callable[..., Path], job_dir: str, pid: int, threads: int = 1) -> None:
    """A ring file in the job's directory that names a live process (its pid and start time), and
    that process (a mapping_child) mapping it."""
    ring = write_ring(10, 64, threads)  # a directory of its own per call
    data = bytearray(ring.read_bytes())
    data[40:44] = pid.to_bytes(4, "little")
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    final = Path(job_dir) / f"ring-{pid}-1.gitm"
    tmp = Path(job_dir) / f".ring-{pid}.tmp"
    tmp.write_bytes(bytes(data))
    os.rename(tmp, final)  # whole, at once: the child maps the finished file
    ino = f" {final.stat().st_ino} "
    deadline = time.monotonic() + 10
    while ino not in Path(f"/proc/{pid}/maps").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
