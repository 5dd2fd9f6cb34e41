"""Jobs through the real daemon and the real CLI: `gitmctl run`, `jobs`, `job`, `trace`.

No GPU here: the job is a process that loads the real shim and calls InitializeInjection exactly
as the CUDA driver does (CUDA_INJECTION64_PATH). The shim creates its ring, answers the control
page, and — with no driver — reports why it cannot capture; what CUPTI records on a GPU is tested
in tests/gpu.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from gitmd.capture import capture_file
from gitmd.capture.ring import Ring
from gitmd.levers.base import LeverError, Target
from gitmd.levers.registry import make as make_lever
from tests.integration.conftest import ROOT, Daemon, command, ctl, ctl_json

SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
needs_shim = pytest.mark.skipif(
    not SHIM.exists(), reason="the shim is not built here (no CUDA toolkit with CUPTI)"
)

FAKE_JOB = """
import ctypes, os, sys, time
if os.environ.get("CUDA_INJECTION64_PATH"):
    ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
print("started", os.environ.get("GITM_JOB_ID", "-"), flush=True)
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline and not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
print("finished", flush=True)
sys.exit(int(sys.argv[3]))
"""


def run_job(
    d: Daemon, tmp: Path, *args: str, seconds: float = 20, code: int = 0
) -> tuple[subprocess.Popen[str], Path]:
    script = tmp / "fake_job.py"
    script.write_text(FAKE_JOB)
    stop = tmp / f"stop-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            *command("gitmctl"),
            "--socket",
            str(d.socket),
            "run",
            *args,
            "--",
            sys.executable,
            str(script),
            str(seconds),
            str(stop),
            str(code),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, stop


def wait_for(pred: Any, timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out")


@needs_shim
def test_run_registers_injects_and_passes_the_exit_status(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp, "--name", "fake", code=7)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[0] == "started" and len(line[1]) == 12
    job_id = line[1]
    job = wait_for(lambda: (j := ctl_json(daemon.socket, "job", job_id)) and j["processes"] and j)
    assert job["name"] == "fake" and job["state"] == "running" and job["capture"]
    p = job["processes"][0]
    assert p["alive"] and p["status"] == "idle" and p["reason"] == "ready"
    runtime = Path(job["runtime_dir"])
    assert (runtime.stat().st_mode & 0o777) == 0o700
    listed = ctl_json(daemon.socket, "jobs")["jobs"]
    assert [j["id"] for j in listed] == [job_id]
    stop.touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, err
    assert out.strip() == "finished"
    done = ctl_json(daemon.socket, "job", job_id)
    assert done["state"] == "exited" and done["exit_code"] == 7
    assert not runtime.exists(), "the job's runtime directory is removed when it ends"
    assert ctl_json(daemon.socket, "jobs")["jobs"] == []
    assert [j["id"] for j in ctl_json(daemon.socket, "jobs", "--all")["jobs"]] == [job_id]


@needs_shim
def test_trace_opens_a_window_the_shim_acknowledges(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp, "--name", "tr")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    wait_for(lambda: ctl_json(daemon.socket, "job", job_id)["processes"])
    out = short_tmp / "trace.json"
    r = ctl(daemon.socket, "trace", "tr", "--duration", "0.5", "-o", str(out), "--json")
    summary = json.loads(r.stdout)
    assert summary["job_id"] == job_id and summary["output"] == str(out)
    trace = json.loads(out.read_text())
    assert trace["otherData"]["job_id"] == job_id and "traceEvents" in trace
    # Without a GPU driver CUPTI cannot subscribe: the shim says so instead of capturing.
    assert any("not capturing" in n for n in summary.get("notes", [])), summary
    raw = short_tmp / "capture.npz"
    ctl(daemon.socket, "trace", "tr", "--duration", "0.3", "--raw", "-o", str(raw))
    window = capture_file.loads(raw)
    assert window.job_id == job_id and window.processes[0].status.pid > 0
    job = ctl_json(daemon.socket, "job", job_id)
    assert job["windows"] == 2
    assert job["processes"][0]["status"] in ("stepped_aside", "idle")
    stop.touch()
    assert proc.wait(30) == 0


@needs_shim
def test_knob_channel_round_trip(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp)
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    runtime = Path(
        wait_for(lambda: (j := ctl_json(daemon.socket, "job", job_id))["processes"] and j)["runtime_dir"]
    )
    ring = Ring(next(runtime.glob("ring-*.gitm")))
    result, out = ring.knob(1)  # PING
    assert result == 0 and out[0] == ring.pid and out[1] > 0
    result, _ = ring.knob(999)
    assert result == -38  # -ENOSYS: an unknown knob is refused, never guessed at
    # host register: gitmctl run preloaded the free guard; without libcuda nothing is registered
    environ = Path(f"/proc/{ring.pid}/environ").read_bytes().split(b"\0")
    preload = next((e for e in environ if e.startswith(b"LD_PRELOAD=")), b"")
    assert preload.split(b"=", 1)[1].split(b":")[0].endswith(b"libgitm_guard.so"), preload
    op = ring.abi.const("GITM_KNOB_HOST_REGISTER")
    assert ring.knob(op, (0x7F0000000000, 1 << 20, 2)) == (0, [0, 0, 0, 0])  # query: not registered
    assert ring.knob(op, (0x1000, 1 << 20, 0))[0] == -14  # -EFAULT: not the process's own memory
    anon = _anonymous_ranges(ring.pid)  # private anonymous read-write memory of the job
    lo, hi = max(anon, key=lambda r: r[1] - r[0])
    assert ring.knob(op, (lo, hi - lo, 0))[0] == -79  # -ELIBACC: fine memory, but no libcuda here
    assert ring.knob(op, (lo, hi - lo + (1 << 40), 0))[0] == -14  # -EFAULT: runs past the mapping
    assert ring.knob(op, (0x7F0000000000, 0, 1))[0] == -2  # -ENOENT: nothing to unregister
    # yield: read, bad values refused, and without a driver CUPTI gives no subscriber to hold launches
    op = ring.abi.const("GITM_KNOB_YIELD")
    assert ring.knob(op, (0, 0, 0, 1)) == (0, [0, 0, 0, 0])
    for bad in ((960, 100, 20), (500, 5, 20), (500, 100, 0), (500, 100, 601)):
        assert ring.knob(op, (*bad, 0))[0] == -22, bad  # -EINVAL, nothing changed
    rc, out = ring.knob(op, (500, 100, 20, 0))
    assert (rc, out[1]) == (-16, 0)  # -EBUSY: not yielding
    assert ring.knob(op, (0, 0, 0, 0)) == (0, [0, 0, 0, 0])  # off: always fine
    # the context's sync scheduling: a value that is not a CU_CTX_SCHED_* is refused first
    op = ring.abi.const("GITM_KNOB_CTX_SCHED")
    assert ring.knob(op, (0, 3, 0))[0] == -22 and ring.knob(op, (0, 8, 0))[0] == -22  # -EINVAL
    assert ring.knob(op, (0, 0, 1))[0] == -79 and ring.knob(op, (0, 1, 0))[0] == -79  # -ELIBACC: no libcuda
    lever = make_lever("sync_spin", pid=ring.pid, device=0)
    target = Target(job_id=job_id, pids=(ring.pid,), rings={ring.pid: str(ring.path)}, owner_uid=os.getuid())
    with pytest.raises(LeverError, match=r"sync_spin on pid .*libcuda"):
        lever.capture(target)  # the lever says why, in words
    ring.close()
    stop.touch()
    assert proc.wait(30) == 0


def _anonymous_ranges(pid: int) -> list[tuple[int, int]]:
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if parts[1] == "rw-p" and parts[4] == "0" and (len(parts) == 5 or parts[5] == "[heap]"):
            out.append((lo, hi))
    return out


def test_run_without_daemon_runs_untouched(short_tmp: Path) -> None:
    script = short_tmp / "fake_job.py"
    script.write_text(FAKE_JOB)
    stop = short_tmp / "stop"
    stop.touch()
    r = subprocess.run(
        [
            *command("gitmctl"),
            "--socket",
            str(short_tmp / "none.sock"),
            "run",
            "--",
            sys.executable,
            str(script),
            "5",
            str(stop),
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 4
    assert r.stdout.split() == ["started", "-", "finished"]
    assert "running the command untraced" in r.stderr


def test_run_no_capture_and_unknown_command(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp, "--no-capture", "--name", "plain")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    job = ctl_json(daemon.socket, "job", job_id)
    assert not job["capture"] and job["runtime_dir"] == ""
    stop.touch()
    assert proc.wait(30) == 0
    r = ctl(daemon.socket, "run", "--", "/nonexistent/program", check=False)
    assert r.returncode == 127 and "cannot run" in r.stderr
    r = ctl(daemon.socket, "trace", "plain", check=False)
    assert r.returncode == 2 and ("without the shim" in r.stderr or "has ended" in r.stderr)
    r = ctl(daemon.socket, "trace", "no-such-job", check=False)
    assert r.returncode == 4 and "no job" in r.stderr


@needs_shim
def test_sigterm_is_forwarded_to_the_job(daemon: Daemon, short_tmp: Path) -> None:
    proc, _ = run_job(daemon, short_tmp, seconds=60)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM


@needs_shim
def test_corrupt_ring_in_a_job_dir_is_ignored(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp)
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    job = wait_for(lambda: (j := ctl_json(daemon.socket, "job", job_id))["processes"] and j)
    runtime = Path(job["runtime_dir"])
    (runtime / "ring-1-1.gitm").write_bytes(os.urandom(10000))
    (runtime / "ring-2-2.gitm").symlink_to("/etc/passwd")
    assert len(ctl_json(daemon.socket, "job", job_id)["processes"]) == 1
    ctl(daemon.socket, "trace", job_id, "--duration", "0.2", "-o", str(short_tmp / "t.json"))
    assert "ignoring" in daemon.log()
    stop.touch()
    assert proc.wait(30) == 0
    assert ctl(daemon.socket, "status", check=False).returncode == 0


@needs_shim
def test_duty_cycle_opens_windows_by_itself(daemon_factory: Any, short_tmp: Path) -> None:
    d = daemon_factory(
        config_text='[telemetry]\nbackend = "sim"\n[metrics]\nport = 0\n'
        "[capture]\nwindow_every_s = 1\nwindow_duration_s = 0.3\n"
    )
    proc, stop = run_job(d, short_tmp, "--name", "duty")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    job = wait_for(lambda: (j := ctl_json(d.socket, "job", job_id))["windows"] >= 2 and j, timeout_s=20)
    assert job["processes"][0]["alive"]
    stop.touch()
    assert proc.wait(30) == 0


def test_gpu_processes_not_launched_through_gitmd_are_shown_with_a_relaunch(
    daemon_factory: Any, short_tmp: Path
) -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--epochs", "3"], cwd=short_tmp
    )
    try:
        d = daemon_factory(
            config_text='[telemetry]\nbackend = "sim"\ninterval_s = 0.2\n[metrics]\nport = 0\n'
            f"[sim]\ngpus = 1\nprocesses = [{{ gpu = 0, pid = {other.pid}, "
            'name = "python3", used_memory_bytes = 1048576 }]\n'
        )
        resp = ctl_json(d.socket, "jobs")
        (u,) = resp["untracked"]
        assert u["pid"] == other.pid and u["gpu_index"] == 0 and u["user"]
        assert u["command"][-2:] == ["--epochs", "3"] and u["cwd"] == str(short_tmp)
        assert "not launched through gitmd" in u["reason"]
        assert u["relaunch"].startswith(f"cd {short_tmp} && gitmctl run --name python3 -- ")
        assert "relaunch:" in ctl(d.socket, "jobs").stdout
    finally:
        other.kill()
        other.wait()


def test_registration_fields_and_bad_contracts(daemon: Daemon, short_tmp: Path) -> None:
    r = subprocess.run(
        [
            *command("gitmctl"),
            "--socket",
            str(daemon.socket),
            "run",
            "--no-capture",
            "--gpus",
            "0,1",
            "--scheduler-job-id",
            "slurm-77",
            "--no-explore",
            "--metric",
            r"loss ([0-9.]+)",
            "--output",
            "out.bin",
            "--",
            sys.executable,
            "-c",
            "import os; print('loss 0.5'); print(os.environ['CUDA_VISIBLE_DEVICES'])",
        ],
        capture_output=True,
        text=True,
        cwd=short_tmp,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.split() == ["loss", "0.5", "GPU-sim-0000-0000,GPU-sim-0000-0001"], r
    # --gpus selects by UUID; an index this host lacks is refused and nothing runs; a repeat is once
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(daemon.socket), "run", "--no-capture", "--gpus", "1,7",
         "--", sys.executable, "-c", "print('ran')"],
        capture_output=True, text=True, cwd=short_tmp, timeout=60,
    )  # fmt: skip
    assert (
        r.returncode != 0 and "ran" not in r.stdout and "no GPU 7 on this host (it has 2: 0..1)" in r.stderr
    ), r
    (job,) = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert job["gpus"] == [0, 1] and job["scheduler_job_id"] == "slurm-77" and not job["allow_exploration"]
    assert 0 < job["wall_s"] < 60  # gitmctl run timed its command from exec to exit and said so
    # and itself around it (its start, imports, registration; the report): part of what gitmd cost the run
    cost = json.loads(job["cost_json"] if "cost_json" in job else job["costJson"])
    assert 0 < cost["launcher_s"] < 60 and cost["total_share"] > cost["share"] == 0.0, cost
    # and what the real daemon and this host did with the CPUs while it ran (read from /proc)
    assert isinstance(cost["gitmd_cpu_s"], float) and 0 <= cost["host_busy"] <= 1, cost
    # a launcher's wall clock that cannot be one is refused, and the job's record is unchanged
    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    stub = pb_grpc.GitmdStub(open_channel(daemon.socket))
    with pytest.raises(grpc.RpcError) as bad:
        stub.ReportJobExit(pb.ReportJobExitRequest(job_id=job["id"], exit_code=0, wall_s=-1.0), timeout=10)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "wall_s" in str(bad.value.details())
    assert ctl_json(daemon.socket, "jobs", "--all")["jobs"][0]["wall_s"] == job["wall_s"]
    # a site report naming what no knob of gitmd's is: refused, nothing recorded
    site = pb.SiteReport(loaded=True, acted=["LD_PRELOAD"])
    with pytest.raises(grpc.RpcError) as bad:
        stub.ReportJobExit(pb.ReportJobExitRequest(job_id=job["id"], exit_code=0, site=site), timeout=10)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "site" in str(bad.value.details())
    kinds = [c["kind"] for c in job["contract"]["checks"]]
    assert kinds == ["stdout_metric", "output_file", "exit_status"]
    assert job["contract"]["checks"][1]["path"] == str(short_tmp / "out.bin") and job["user"]
    shown = ctl(daemon.socket, "job", job["id"]).stdout
    assert "slurm-77" in shown and "stdout /loss ([0-9.]+)/" in shown
    # a contract that cannot be evaluated: refused at registration, and nothing runs
    r = subprocess.run(
        [
            *command("gitmctl"),
            "--socket",
            str(daemon.socket),
            "run",
            "--metric",
            "no group",
            "--",
            sys.executable,
            "-c",
            "print('ran')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert "exactly one capture group" in r.stderr
    assert len(ctl_json(daemon.socket, "jobs", "--all")["jobs"]) == 1


@needs_shim
def test_watch_jobs_streams_the_lifecycle(daemon: Daemon, short_tmp: Path) -> None:
    watcher = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(daemon.socket), "jobs", "--watch", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout is not None
    time.sleep(1.0)  # subscribed before the job starts
    proc, stop = run_job(daemon, short_tmp, "--name", "watched")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    wait_for(lambda: ctl_json(daemon.socket, "job", job_id)["processes"])
    ctl(daemon.socket, "trace", job_id, "--duration", "0.2", "-o", str(short_tmp / "t.json"))
    stop.touch()
    assert proc.wait(30) == 0
    kinds = []
    while "exited" not in kinds:
        ev = json.loads(watcher.stdout.readline())
        assert ev["job"]["id"] == job_id
        kinds.append(ev["kind"])
    watcher.terminate()
    watcher.wait(10)
    assert kinds == ["registered", "running", "window", "exited"]


@needs_shim
def test_explain_a_running_job(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp, "--name", "explained")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    wait_for(lambda: ctl_json(daemon.socket, "job", job_id)["processes"])
    report = ctl_json(daemon.socket, "explain", "explained")  # no window yet: one is taken now
    assert report["job_id"] == job_id and report["window_id"] >= 1
    assert "no kernels or copies" in ctl(daemon.socket, "explain", job_id).stdout  # no GPU here
    assert ctl_json(daemon.socket, "job", job_id)["windows"] == 1  # the second used the latest window
    w = report["window_id"]
    assert ctl_json(daemon.socket, "explain", job_id, "--window", str(w))["window_id"] == w
    r = ctl(daemon.socket, "explain", job_id, "--window", str(w + 100), check=False)
    assert r.returncode == 4 and f"keeps the latest window and the reports it made: {w}" in r.stderr
    stop.touch()
    assert proc.wait(30) == 0
    # ended: its last reports stay readable (issue: "explain keeps working after a job ends")
    kept = ctl_json(daemon.socket, "explain", job_id)
    assert kept["window_id"] == w and any("the job has ended (exited, exit 0)" in n for n in kept["notes"])
    r = ctl(daemon.socket, "explain", job_id, "--window", str(w + 100), check=False)
    assert r.returncode == 4 and f"is not kept; kept: {w}" in r.stderr
    r = ctl(daemon.socket, "explain", check=False)
    assert r.returncode == 2 and "--capture" in r.stderr
    r = ctl(daemon.socket, "explain", "nope", check=False)
    assert r.returncode == 4


def test_the_container_launcher_runs_through_gitmd_or_untouched(daemon: Daemon, short_tmp: Path) -> None:
    launcher = ROOT / "packaging" / "k8s" / "gitm-launch"
    env = {**os.environ, "PATH": f"{Path(command('gitmctl')[0]).parent}:{os.environ['PATH']}"}
    probe = ["--name", "pod", "--no-capture", "--", "sh", "-c", 'echo "job=${GITM_JOB_ID:-none}"; exit 7']
    r = subprocess.run(
        [str(launcher), *probe],
        env={**env, "GITMD_SOCKET": str(daemon.socket)},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 7 and r.stdout.startswith("job=") and "job=none" not in r.stdout, r.stderr
    r = subprocess.run(
        [str(launcher), *probe],
        env={**env, "GITMD_SOCKET": str(short_tmp / "none.sock")},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 7 and r.stdout == "job=none\n" and r.stderr == ""


def test_a_background_job_says_so_everywhere(daemon: Daemon, short_tmp: Path) -> None:
    proc, stop = run_job(daemon, short_tmp, "--name", "hog", "--background")
    assert proc.stdout is not None
    job_id = proc.stdout.readline().split()[1]
    assert ctl_json(daemon.socket, "job", job_id)["background"] is True
    assert "[background]" in ctl(daemon.socket, "jobs").stdout
    assert "background (yields its GPU to foreground jobs)" in ctl(daemon.socket, "job", job_id).stdout
    stop.touch()
    assert proc.wait(30) == 0
    fg, stop2 = run_job(daemon, short_tmp, "--name", "train")
    assert fg.stdout is not None
    fg_id = fg.stdout.readline().split()[1]
    assert not ctl_json(daemon.socket, "job", fg_id).get("background", False)
    assert "foreground" in ctl(daemon.socket, "job", fg_id).stdout
    stop2.touch()
    assert fg.wait(30) == 0


CRASHY = """
import ctypes, os, signal, sys
if os.environ.get("CUDA_INJECTION64_PATH"):
    ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
print("shim", "on" if os.environ.get("CUDA_INJECTION64_PATH") else "off", flush=True)
if sys.argv[1] == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
"""


@needs_shim
def test_a_run_that_crashes_under_gitmd_is_told_apart_and_its_program_then_runs_plainly(
    daemon: Daemon, short_tmp: Path
) -> None:
    """A job that dies of SIGSEGV with gitmd's shim in it may have been killed by gitmd: `gitmctl job`
    says so, and the same program's next launches run without the shim (and so without windows or
    trials) until one ends cleanly."""
    script = short_tmp / "crashy.py"
    script.write_text(CRASHY)

    def launch(mode: str) -> subprocess.CompletedProcess[str]:
        return ctl(
            daemon.socket,
            "run",
            "-v",
            "--launch-key",
            "crashy",
            "--",
            sys.executable,
            str(script),
            mode,
            check=False,
        )

    r = launch("crash")
    assert r.returncode == 128 + signal.SIGSEGV and "shim on" in r.stdout
    (crashed,) = [j for j in ctl_json(daemon.socket, "jobs", "--all")["jobs"] if j.get("exit_code") == -11]
    shown = ctl(daemon.socket, "job", crashed["id"]).stdout
    assert "may be gitmd's: died of SIGSEGV" in shown
    assert "may be gitmd's" in ctl_json(daemon.socket, "job", crashed["id"])["crash"]
    said = ctl(daemon.socket, "explain", crashed["id"], check=False)
    assert "may be gitmd's: died of SIGSEGV" in said.stdout + said.stderr
    r = launch("crash")  # the program crashes again, now with nothing of gitmd's in it: its own crash
    assert "shim off" in r.stdout and "crashed under it" in r.stderr
    r = launch("ok")
    assert r.returncode == 0 and "shim off" in r.stdout  # not clean yet before this run
    r = launch("ok")
    assert r.returncode == 0 and "shim on" in r.stdout  # a clean run without capture: capture resumes


CLOCKED = """
import ctypes, os, sys, time
time.sleep(float(sys.argv[1]))  # the interpreter's start and imports: before CUDA
lib = os.environ.get("CUDA_INJECTION64_PATH", "")
if lib:
    ctypes.CDLL(lib).InitializeInjection()  # cuInit, as the driver does it
print("injected", os.path.basename(lib) or "-", flush=True)
time.sleep(float(sys.argv[2]))  # the CUDA part
"""


@needs_shim
def test_a_run_without_a_window_is_timed_from_its_cuda_start_by_the_clock_library(
    daemon_factory: Any, short_tmp: Path
) -> None:
    """The observation backoff rests the program's second run: it goes without the shim, gitmd's
    clock library in its place stamps its CUDA start, and the launcher reports its length from
    there (run_s), short of its exec-to-exit time (wall_s) by the start before CUDA."""
    d = daemon_factory(
        config_text='[telemetry]\nbackend = "sim"\n[metrics]\nport = 0\n'
        "[capture]\nwindow_every_s = 1\nwindow_duration_s = 0.3\nsettle_s = 0\nobserve_runs = 1\n"
    )
    script = short_tmp / "clocked.py"
    script.write_text(CLOCKED)

    def launch(before_s: float, cuda_s: float) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        r = ctl(d.socket, "run", "--launch-key", "clocked", "--", sys.executable, str(script),
                str(before_s), str(cuda_s), timeout=60)  # fmt: skip
        job = next(j for j in ctl_json(d.socket, "jobs", "--all")["jobs"] if j["state"] == "exited"
                   and j["id"] not in seen)  # fmt: skip
        seen.add(job["id"])
        return r, ctl_json(d.socket, "job", job["id"])

    seen: set[str] = set()
    r, first = launch(0.0, 4.0)  # observed: the shim, its windows
    assert "injected libgitm_shim.so" in r.stdout and first["windows"] >= 1
    r, rested = launch(1.5, 1.0)
    assert "injected libgitm_clock.so" in r.stdout, r.stdout + r.stderr
    assert not rested["capture"] and rested["windows"] == 0
    assert 0.9 <= rested["run_s"] <= 1.6 < 1.5 + 1.0 <= rested["wall_s"]
    assert json.loads(rested["cost_json"])["run_s"] == rested["run_s"]
    r, again = launch(1.5, 1.0)  # the backoff rests it again (observed once, every other run)
    if "libgitm_clock.so" in r.stdout:
        assert 0.9 <= again["run_s"] <= 1.6
    # a report that says the CUDA part outlasted the run is refused, and changes nothing
    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    stub = pb_grpc.GitmdStub(open_channel(d.socket))
    bad_exit = pb.ReportJobExitRequest(job_id=rested["id"], exit_code=0, wall_s=1.0, cuda_s=2.0)
    with pytest.raises(grpc.RpcError) as bad:
        stub.ReportJobExit(bad_exit, timeout=10)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "cuda_s" in str(bad.value.details())
    assert ctl_json(d.socket, "job", rested["id"])["run_s"] == rested["run_s"]
