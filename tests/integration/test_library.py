"""The library over the real socket with the real CLI: a recurring job gets its policy at launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitmd.jobs.launch_key import launch_key, owned
from tests.integration.conftest import Daemon, command, ctl, ctl_json

PROBE = (
    "import os; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS', '-'), os.environ.get('GITM_JOB_ID', '-'))"
)


def document(key: str) -> dict:
    return {
        "format": "gitm-library",
        "version": 1,
        "workloads": [
            {
                "id": "00c0ffee0001",
                "name": "probe",
                "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
                "first_seen_ns": 1,
                "last_seen_ns": 2,
                "run_count": 5,
                "launch_keys": [key],
                "policies": [
                    {"env": {"LD_PRELOAD": "/tmp/evil.so"}, "status": "validated"},
                ],
            }
        ],
    }


def test_recurring_job_gets_its_pinned_policy_at_launch(daemon: Daemon, short_tmp: Path) -> None:
    # launch keys are bound to the user who launches (docs/security.md): this test's user
    key = owned(os.getuid(), launch_key([sys.executable, "-c", PROBE], str(short_tmp)))
    doc = document(key)
    bad = short_tmp / "bad.json"
    bad.write_text(json.dumps(doc))
    r = ctl(daemon.socket, "library", "import", str(bad), check=False)
    assert r.returncode == 2 and "may not be set by a policy" in r.stderr
    assert ctl_json(daemon.socket, "library", "list")["workloads"] == []

    doc["workloads"][0]["policies"] = [
        {"env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "status": "validated", "speedup": 1.02},
        {
            "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"},  # a catalog lever's variable: no other may be set
            "status": "pinned",
            "speedup": 1.3,
            "ci_low": 1.2,
            "ci_high": 1.4,
            "gpu_model": "NVIDIA H200",
        },
    ]
    good = short_tmp / "good.json"
    good.write_text(json.dumps(doc))
    assert ctl_json(daemon.socket, "library", "import", str(good)) == {
        "workloads_added": 1,
        "policies_added": 2,
    }
    w = ctl_json(daemon.socket, "library", "show", "00c0ffee0001")
    pinned = next(p for p in w["policies"] if p["status"] == "pinned")
    assert w["active_policy_id"] == pinned["id"] and w["launch_keys"] == [key]
    assert "NVIDIA H200" in ctl(daemon.socket, "library", "show", "00c0ffee0001").stdout

    r = subprocess.run(
        [
            *command("gitmctl"),
            "--socket",
            str(daemon.socket),
            "run",
            "--no-capture",
            "--",
            sys.executable,
            "-c",
            PROBE,
        ],
        capture_output=True,
        text=True,
        cwd=short_tmp,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    knob, job_id = r.stdout.split()
    assert knob == "8", "the pinned policy's settings reach the job at launch"
    assert "known workload 00c0ffee0001" in r.stderr
    job = ctl_json(daemon.socket, "job", job_id)
    assert job["workload_id"] == "00c0ffee0001" and job["launch_key"] == key
    assert job["policy_id"] == pinned["id"]

    # operator actions, then export round trip
    policy_id = str(pinned["id"])
    assert ctl_json(daemon.socket, "library", "unpin", policy_id)["status"] == "validated"
    assert ctl_json(daemon.socket, "library", "pin", policy_id)["status"] == "pinned"
    assert ctl_json(daemon.socket, "library", "revert", policy_id)["status"] == "reverted"
    r = ctl(daemon.socket, "library", "pin", policy_id, check=False)
    assert r.returncode == 2 and "reverted" in r.stderr
    r = ctl(daemon.socket, "library", "pin", "999999", check=False)
    assert r.returncode == 4
    exported = json.loads(ctl(daemon.socket, "library", "export").stdout)
    assert exported["format"] == "gitm-library" and len(exported["workloads"]) == 1
    r = ctl(daemon.socket, "library", "show", "ffffffffffff", check=False)
    assert r.returncode == 4 and "no workload" in r.stderr


def test_a_cpu_affinity_policy_is_set_by_gitmctl_run_before_exec(daemon: Daemon, short_tmp: Path) -> None:
    """A workload whose validated policy holds cpu_affinity: `gitmctl run` says its CPUs with the
    registration, gets quiet ones among them in the plan and runs the command on them from its first
    instruction (the command's own affinity shows it)."""
    import os

    import pytest

    start = os.sched_getaffinity(0)
    if len(start) < 3:
        pytest.skip("needs three CPUs: the policy takes at least two, and fewer than the job starts on")
    probe = "import os; print(','.join(map(str, sorted(os.sched_getaffinity(0)))))"
    key = owned(os.getuid(), launch_key([sys.executable, "-c", probe], str(short_tmp)))
    doc = document(key)
    doc["workloads"][0]["policies"] = [
        {"env": {}, "live": [{"lever": "cpu_affinity"}], "status": "validated"}
    ]
    lib = short_tmp / "lib.json"
    lib.write_text(json.dumps(doc))
    ctl_json(daemon.socket, "library", "import", str(lib))
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(daemon.socket), "run", "--", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=short_tmp,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    ran = {int(c) for c in r.stdout.split(",")}
    assert f"running on CPUs {','.join(map(str, sorted(ran)))}" in r.stderr
    assert ran < start and len(ran) == max(2, min(len(start), 8))


def test_a_contract_given_once_holds_the_workloads_later_runs(daemon: Daemon, short_tmp: Path) -> None:
    """Convergence issue, item 4: the consent to numerics-changing levers is given once, on the
    workload (`gitmctl library contract`), and its later runs launched with no contract of their own
    are held to it: the job carries it, and `gitmctl run` reads the metric off the program's stdout
    and reports it at exit, as with --metric. A contract that cannot be evaluated is refused."""
    program = [sys.executable, "-c", "print('step 1 loss=2.5'); print('step 2 loss=1.25')"]
    key = owned(os.getuid(), launch_key(program, str(short_tmp)))
    doc = document(key)
    doc["workloads"][0]["id"] = "00c0ffee0002"
    doc["workloads"][0]["policies"] = []
    path = short_tmp / "w.json"
    path.write_text(json.dumps(doc))
    ctl(daemon.socket, "library", "import", str(path))
    r = ctl(daemon.socket, "library", "contract", "00c0ffee0002", "--metric", "(no group", check=False)
    assert r.returncode == 2 and "contract" in r.stderr
    wid = "00c0ffee0002"
    r = ctl(daemon.socket, "library", "contract", wid, "--metric", r"loss=([0-9.]+)", "--rtol", "1e-3")
    assert "held to --metric" in r.stdout and "loss=" in r.stdout
    assert "--metric 'loss=([0-9.]+)' --rtol 0.001" in ctl(daemon.socket, "library", "show", wid).stdout
    r = ctl(daemon.socket, "library", "contract", wid, "--rtol", "1e-2", check=False)
    assert r.returncode == 2 and "--rtol goes with --metric" in r.stderr
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(daemon.socket), "run", "-v", "--", *program],
        capture_output=True, text=True, cwd=short_tmp, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "loss=1.25" in r.stdout  # its stdout passes through
    job_id = r.stderr.split("job ", 1)[1].split()[0]
    job = ctl_json(daemon.socket, "job", job_id)
    checks = job["contract"]["checks"]
    assert [c["kind"] for c in checks] == ["stdout_metric", "exit_status"]
    assert checks[0]["regex"] == r"loss=([0-9.]+)"
    # a run with a contract of its own keeps it
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(daemon.socket), "run", "-v", "--output", "o", "--", *program],
        capture_output=True, text=True, cwd=short_tmp, timeout=60,
    )  # fmt: skip
    own = ctl_json(daemon.socket, "job", r.stderr.split("job ", 1)[1].split()[0])["contract"]["checks"]
    assert [c["kind"] for c in own] == ["output_file", "exit_status"]
    # over the API: a file or a second metric is refused, and nothing changes
    import grpc

    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    with open_channel(daemon.socket) as ch:
        stub = pb_grpc.GitmdStub(ch)
        for checks in (
            [pb.EquivalenceCheck(kind="output_file", path="/tmp/o", compare="checksum")],
            [pb.EquivalenceCheck(kind="stdout_metric", regex=r"a=(\S+)"),
             pb.EquivalenceCheck(kind="stdout_metric", regex=r"b=(\S+)")],
        ):  # fmt: skip
            contract = pb.EquivalenceContract(checks=checks)
            req = pb.SetWorkloadContractRequest(workload_id=wid, contract=contract)
            try:
                stub.SetWorkloadContract(req, timeout=10)
                raise AssertionError("accepted")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "one number" in (e.details() or "")
        got = stub.GetWorkloadContract(pb.GetWorkloadRequest(workload_id=wid), timeout=10)
        assert [c.regex for c in got.checks][:1] == [r"loss=([0-9.]+)"]
    r = ctl(daemon.socket, "library", "contract", "00c0ffee0002", "--clear")
    assert "contract removed" in r.stdout
    r = ctl(daemon.socket, "library", "contract", "00c0ffee0002")
    assert "your runs' contract: none" in r.stdout
