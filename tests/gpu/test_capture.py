"""On the GPU host: unmodified CUDA programs under `gitmctl run`, captured by the shim.

Each program does an exactly known amount of work after a trigger file appears; a capture window
opened around it must hold every kernel, every copy with its pageable/pinned kind, the allocation
and the syncs. A child process is captured too. gitmd killed mid-window leaves the job's output
unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gitmd.analysis import timeline
from gitmd.analysis.trace_export import to_chrome_trace
from gitmd.capture import capture_file
from tests.integration.conftest import ROOT, Daemon, command, ctl, ctl_json, free_port

PROGRAMS = Path(__file__).parent / "programs"
CONFIG = """
[telemetry]
backend = "nvml"
[metrics]
port = {port}
[capture]
window_every_s = 0
"""
PAGEABLE, PINNED, HTOD = 1, 2, 1


def out_dir() -> Path | None:
    d = os.environ.get("GITMD_GPU_OUT")
    return Path(d) if d else None


@pytest.fixture(scope="module")
def known_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("nvcc"):
        pytest.skip("nvcc is not installed")
    exe = tmp_path_factory.mktemp("bin") / "known_work"
    subprocess.run(
        ["nvcc", "-O2", "-arch=sm_90", "-o", str(exe), str(PROGRAMS / "known_work.cu")], check=True
    )
    return exe


@pytest.fixture
def gpu_daemon(daemon_factory: Any) -> Daemon:
    if not (ROOT / "shim" / "build" / "libgitm_shim.so").exists():
        pytest.fail("the shim is not built: tests/gpu/run.sh builds it with make -C shim")
    return daemon_factory(config_text=CONFIG.format(port=free_port()))  # type: ignore[no-any-return]


def start_job(
    d: Daemon, name: str, argv: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "--name", name, "--", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )


def wait_processes(d: Daemon, name: str, n: int, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = ctl_json(d.socket, "job", name)
        if len(job["processes"]) >= n:
            return job  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"job {name}: fewer than {n} rings appeared")


def wait_gpus(d: Daemon, name: str, view: dict[str, Any], timeout_s: float = 30) -> dict[str, Any]:
    """The job's view once every process in it shows its GPUs (they come from the next telemetry
    sample), or the last one seen when ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(p.get("gpus") for p in view["processes"]):
        time.sleep(0.5)
        view = ctl_json(d.socket, "job", name)
    return view


def traced(d: Daemon, job: str, seconds: float, out: Path) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def go() -> None:
        r = ctl(
            d.socket,
            "trace",
            job,
            "--duration",
            str(seconds),
            "--raw",
            "-o",
            str(out),
            "--json",
            timeout=120,
            check=False,
        )
        result["rc"], result["stdout"], result["stderr"] = r.returncode, r.stdout, r.stderr

    t = threading.Thread(target=go)
    t.start()
    return t, result


def save_fixture(src: Path, name: str) -> None:
    o = out_dir()
    if o is not None:
        shutil.copy(src, o / name)


def test_non_torch_program_every_kernel_copy_and_allocation(
    gpu_daemon: Daemon, known_work: Path, short_tmp: Path
) -> None:
    trig, end = short_tmp / "go", short_tmp / "end"
    job = start_job(gpu_daemon, "known", [str(known_work), str(trig), str(end), "1000", "10"])
    assert job.stdout is not None
    assert job.stdout.readline().strip() == "ready"
    wait_processes(gpu_daemon, "known", 1)
    cap = short_tmp / "known.npz"
    t, _ = traced(gpu_daemon, "known", 4.0, cap)
    time.sleep(1.5)  # the window is open and acknowledged well before this
    trig.touch()
    assert job.stdout.readline().startswith("done")
    t.join(120)
    end.touch()
    assert job.wait(60) == 0, job.stderr.read() if job.stderr else ""
    w = capture_file.loads(cap)
    assert len(w.processes) == 1 and not w.notes, w.notes
    r = w.processes[0].records
    probe = [i for i, n in r.names.items() if "gitm_probe_kernel" in n]
    assert len(probe) == 1
    assert int(np.sum(r.kernels["name_id"] == probe[0])) == 1000
    htod = r.memcpys[r.memcpys["copy_kind"] == HTOD]
    assert int(np.sum(htod["src_kind"] == PAGEABLE)) == 10
    assert int(np.sum(htod["src_kind"] == PINNED)) == 10
    mem = r.memory[r.memory["bytes"] == 64 << 20]
    assert sorted(mem["op"].tolist()) == [1, 2]  # one allocation, one release
    assert len(r.syncs) >= 1
    assert w.processes[0].status.ring_drops == 0 and w.processes[0].status.cupti_drops == 0
    tl = timeline.build(w)
    trace = to_chrome_trace(tl, [])
    ks = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert len(ks) == len(r.kernels) and all(e["ts"] >= -1e6 for e in ks)
    save_fixture(cap, "capture-cuda-known-work.npz")


def test_torch_program_and_its_child_process(gpu_daemon: Daemon, short_tmp: Path) -> None:
    trig, end = short_tmp / "go", short_tmp / "end"
    job = start_job(
        gpu_daemon,
        "torchkw",
        [sys.executable, str(PROGRAMS / "torch_known_work.py"), str(trig), str(end), "500", "300", "8"],
    )
    assert job.stdout is not None
    ready = job.stdout.readline().split()
    assert ready[0] == "ready"
    main_pid, child_pid = int(ready[1]), int(ready[2])
    wait_processes(gpu_daemon, "torchkw", 2)
    cap = short_tmp / "torch.npz"
    t, _ = traced(gpu_daemon, "torchkw", 5.0, cap)
    time.sleep(2.0)
    trig.touch()
    done = job.stdout.readline().split()
    assert done[0] == "done" and float(done[1]) == 500.0
    t.join(120)
    end.touch()
    assert job.wait(60) == 0
    w = capture_file.loads(cap)
    by_pid = {p.pid: p.records for p in w.processes}
    assert {main_pid, child_pid} <= set(by_pid), (set(by_pid), w.notes)
    main, child = by_pid[main_pid], by_pid[child_pid]
    assert len(main.kernels) == 500, {main.names.get(int(i)) for i in set(main.kernels["name_id"].tolist())}
    assert len(child.kernels) == 300
    htod = main.memcpys[main.memcpys["copy_kind"] == HTOD]
    assert int(np.sum(htod["src_kind"] == PAGEABLE)) == 8 and int(np.sum(htod["src_kind"] == PINNED)) == 8
    assert int(np.sum((main.memory["op"] == 1) & (main.memory["bytes"] >= 256 << 20))) == 1
    save_fixture(cap, "capture-torch-known-work.npz")


def test_gitmd_killed_mid_window_leaves_the_job_unchanged(gpu_daemon: Daemon, short_tmp: Path) -> None:
    script = str(PROGRAMS / "torch_train.py")
    plain = subprocess.run([sys.executable, script, "4000"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0
    job = start_job(gpu_daemon, "train", [sys.executable, script, "4000"])
    assert job.stdout is not None
    assert job.stdout.readline().strip() == "started"
    wait_processes(gpu_daemon, "train", 1)
    cap = short_tmp / "train.npz"
    t, res = traced(gpu_daemon, "train", 1.0, cap)
    t.join(60)
    assert res["rc"] == 0, res
    save_fixture(cap, "capture-torch-train.npz")
    t2, _ = traced(gpu_daemon, "train", 30.0, short_tmp / "never.npz")
    time.sleep(1.0)
    assert gpu_daemon.proc is not None
    gpu_daemon.proc.send_signal(signal.SIGKILL)
    gpu_daemon.proc.wait(30)
    rest, _err = job.communicate(timeout=300)
    t2.join(60)
    assert job.returncode == 0
    assert "started\n" + rest == plain.stdout, "the job's output changed"
    w = capture_file.loads(cap)
    assert len(w.processes[0].records.kernels) > 100


def test_payload_samples_hold_the_values_item_read(gpu_daemon: Daemon, short_tmp: Path) -> None:
    from gitmd.capture import payloads

    trig, end = short_tmp / "go", short_tmp / "end"
    job = start_job(
        gpu_daemon, "item", [sys.executable, str(PROGRAMS / "torch_item.py"), str(trig), str(end), "50"]
    )
    assert job.stdout is not None
    assert job.stdout.readline().strip() == "ready"
    wait_processes(gpu_daemon, "item", 1)
    cap = short_tmp / "item.npz"
    t, _ = traced(gpu_daemon, "item", 4.0, cap)
    time.sleep(1.5)
    trig.touch()
    printed = [float(v) for v in job.stdout.readline().split()[1:]]
    t.join(120)
    end.touch()
    assert job.wait(60) == 0
    assert printed == [6 * (s + 0.5) for s in range(50)]
    w = capture_file.loads(cap)
    r = w.processes[0].records
    got = payloads.scalars(r, "<f4").tolist()
    assert got == printed, (got, [s.source for s in payloads.samples(r)][:5])
    save_fixture(cap, "capture-torch-item-payloads.npz")


def test_a_job_that_profiles_itself_keeps_its_profile(gpu_daemon: Daemon, short_tmp: Path) -> None:
    """Kineto (torch.profiler) is a CUPTI client: the shim must step aside, not take its records.
    The free guard preloaded into the job sees its CUPTI calls. Seen on the H200 2026-12-02 (0 of
    200 kernels in the job's profile): Kineto's first profile subscribes to CUPTI and gives up its
    whole CUDA trace when the one subscriber slot is taken — the shim held it for a detach pending
    after gitmd's first window; the shim now gives the slot up. After the profile gitmd captures
    the job again (Kineto keeps its subscriber)."""
    trig, end = short_tmp / "go", short_tmp / "end"
    argv = [sys.executable, str(PROGRAMS / "torch_profiled.py"), str(trig), str(end)]
    plain = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert plain.stdout is not None and plain.stdout.readline().strip() == "ready"
    trig.touch()
    alone = int(plain.stdout.readline().split()[1])
    end.touch()
    assert plain.wait(60) == 0 and alone >= 200
    trig.unlink()
    end.unlink()
    job = start_job(gpu_daemon, "profiled", argv, {"GITM_GUARD_TRACE": "1"})  # the guard's view, on stderr
    assert job.stdout is not None and job.stdout.readline().strip() == "ready"
    wait_processes(gpu_daemon, "profiled", 1)
    trig.touch()
    time.sleep(0.3)  # the profiler is on now
    t, res = traced(gpu_daemon, "profiled", 0.5, short_tmp / "profiled.npz")
    t.join(60)
    seen = int(job.stdout.readline().split()[1])
    status = ctl_json(gpu_daemon.socket, "job", "profiled")["processes"][0]  # while the process lives
    # the profile over (Kineto keeps its CUPTI subscriber), gitmd captures the job again
    t2, after = traced(gpu_daemon, "profiled", 0.5, short_tmp / "after.npz")
    t2.join(60)
    end.touch()
    _, err = job.communicate(timeout=60)
    out = out_dir()
    if out is not None:
        (out / "profiled-status.txt").write_text(f"{status}\n{res}\n{after}\n{err}\n")
    assert job.returncode == 0
    assert seen == alone, f"the job's own profile lost kernels: {seen} of {alone}; {status}; {err[-3000:]}"
    assert status["status"] in ("stepped_aside", "idle"), status
    assert after["rc"] == 0, after
    assert int(json.loads(after["stdout"])["kernels"]) > 0, after
