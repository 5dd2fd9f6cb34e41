"""`gitmctl tune` over the real socket: trials run by the CLI, decided by gitmd, the winner stored
as a policy that the next `gitmctl run` of the command gets at launch.

The program reads the levers' variables the way a real one does (OpenMP's thread count, CUDA's
connection count, PyTorch's TF32 override) and its speed and printed loss depend on them: fewer
OpenMP threads make it faster with the same loss, more connections slower, TF32 faster with a
different loss. No GPU is needed: tune's machinery is the same on any command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitmd.jobs.launch_key import launch_key, owned
from tests.integration.conftest import Daemon, command, ctl, ctl_json

PROG = """
import os, time
t = 0.45
if os.environ.get("OMP_NUM_THREADS") == "4":
    t -= 0.3
if os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "32":
    t += 0.2
tf32 = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"
if tf32:
    t -= 0.3
time.sleep(t)
print(f"step_ms={t * 1000:.1f} loss={1.0 + (0.01 if tf32 else 0.0):.6f}")
"""


def library_doc(key: str) -> dict:
    return {
        "format": "gitm-library",
        "version": 1,
        "workloads": [
            {
                "id": "00c0ffee0002",
                "name": "prog",
                "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
                "first_seen_ns": 1,
                "last_seen_ns": 2,
                "run_count": 1,
                "launch_keys": [key],
                "policies": [],
            }
        ],
    }


def tune(d: Daemon, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "tune", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_tune_promotes_the_faster_lever_and_the_next_run_gets_it(daemon: Daemon, short_tmp: Path) -> None:
    prog = short_tmp / "prog.py"
    prog.write_text(PROG)
    doc = short_tmp / "lib.json"
    key = owned(os.getuid(), launch_key([sys.executable, str(prog)], str(short_tmp)))  # bound to its user
    doc.write_text(json.dumps(library_doc(key)))
    ctl(daemon.socket, "library", "import", str(doc))

    levers = "cpu_threads,cuda_device_max_connections,tf32_override"
    r = tune(daemon, short_tmp, "--levers", levers, "--metric", r"loss=(\S+)", "--rtol", "1e-4", "--json",
             "--", sys.executable, str(prog))  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    by = {e["lever"]: e for e in out["experiments"]}
    assert set(by) == {"cpu_threads", "cuda_device_max_connections", "tf32_override"}
    assert by["cpu_threads"]["state"] == "promoted" and by["cpu_threads"]["ci_low"] >= 1.03
    assert by["cuda_device_max_connections"]["state"] == "reverted"
    # faster, but its loss changed: never promoted
    assert by["tf32_override"]["state"] == "reverted" and "differs" in by["tf32_override"]["reason"]
    assert all(len(e["arms"]) == 6 for e in by.values())
    assert out["policy"]["env"] == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    assert json.loads(out["policy"]["evidence_json"])["source"] == "tune"
    assert "[1/3]" in r.stderr and "round 3/3" in r.stderr  # progress while it runs

    # the next launch gets the policy at once
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(daemon.socket), "run", "--", sys.executable, str(prog)],
        capture_output=True, text=True, cwd=short_tmp, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and "step_ms=150.0" in r.stdout, r.stdout + r.stderr
    assert "launching with its validated policy" in r.stderr
    w = ctl_json(daemon.socket, "library", "show", "00c0ffee0002")
    assert w["active_policy_id"] == out["policy"]["id"]
    audit = ctl(daemon.socket, "audit").stdout
    assert "tune" in audit
    # the reference run has ended: explain still says what was tried on it, and the figures
    ref = out["experiments"][0]["job_id"]
    r = ctl(daemon.socket, "explain", ref)
    assert "no attribution" in r.stdout and "tried:" in r.stdout and "cpu_threads" in r.stdout, r.stdout
    # a tune result is recorded once per reference job: a loop of RecordTune on it wrote experiment
    # rows without bound (hardening issue, item 5)
    import grpc

    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    trials = [pb.TuneTrial(arm=a, value=v) for a, v in (("A", 1.0), ("B", 1.0)) * 3]
    with open_channel(daemon.socket) as ch:
        stub = pb_grpc.GitmdStub(ch)
        try:
            stub.RecordTune(
                pb.RecordTuneRequest(job_id=ref, levers=[pb.TuneLever(lever="cpu_threads", trials=trials)]),
                timeout=10,
            )
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and "once per job" in str(e.details())
        else:
            raise AssertionError("a second tune result was recorded on the same job")
        after = stub.GetExperiment(pb.GetExperimentRequest(job_id=ref), timeout=10).experiments
    assert len(after) == len(out["experiments"])


def test_tune_skips_numerics_levers_without_a_number_contract_and_refuses_bad_input(
    daemon: Daemon, short_tmp: Path
) -> None:
    prog = short_tmp / "prog.py"
    prog.write_text(PROG)
    r = tune(daemon, short_tmp, "--levers", "tf32_override", "--", sys.executable, str(prog))
    assert r.returncode == 0, r.stderr
    assert "skipping tf32_override" in r.stderr and "no lever was tried" in r.stderr
    r = tune(daemon, short_tmp, "--levers", "cpu_affinity", "--", sys.executable, str(prog))
    assert r.returncode == 2 and "not a launch lever" in r.stderr
    r = tune(daemon, short_tmp, "--rounds", "2", "--", sys.executable, str(prog))
    assert r.returncode == 2 and "at least 3" in r.stderr
    r = tune(daemon, short_tmp, "--", sys.executable, "-c", "raise SystemExit(3)")
    assert r.returncode == 1 and "the command failed (exit 3)" in r.stderr
    # a result naming a lever outside the catalog is refused by gitmd, nothing written
    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    job = json.loads(ctl(daemon.socket, "jobs", "--all", "--json").stdout)["jobs"][0]["id"]
    with open_channel(daemon.socket) as ch:
        stub = pb_grpc.GitmdStub(ch)
        for bad in (
            pb.TuneLever(lever="LD_PRELOAD", trials=[]),
            pb.TuneLever(lever="cpu_threads", setting_json="[1]"),
            pb.TuneLever(lever="cpu_threads", trials=[pb.TuneTrial(arm="A", value=1.0)] * 6),
            pb.TuneLever(
                lever="cpu_threads",
                trials=[pb.TuneTrial(arm="A", value=-1.0), pb.TuneTrial(arm="B", value=1)],
            ),
        ):
            try:
                stub.RecordTune(pb.RecordTuneRequest(job_id=job, levers=[bad]), timeout=10)
            except Exception as e:
                assert "INVALID_ARGUMENT" in str(e.code()), e  # type: ignore[attr-defined]
            else:
                raise AssertionError(f"accepted {bad}")
        exps = stub.GetExperiment(pb.GetExperimentRequest(job_id=job), timeout=10).experiments
    assert list(exps) == []


def test_ctrl_c_ends_the_running_trial_as_a_job_and_records_nothing(daemon: Daemon, short_tmp: Path) -> None:
    import os
    import signal
    import time

    p = subprocess.Popen(
        [*command("gitmctl"), "--socket", str(daemon.socket), "tune", "--", sys.executable, "-c",
         "import time; time.sleep(60)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=short_tmp, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not ctl_json(daemon.socket, "jobs")["jobs"]:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted: nothing recorded" in err, err
    (job,) = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert job["state"] == "exited", job
