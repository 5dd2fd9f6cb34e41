"""Access control with real Unix users against the real daemon over its real sockets.

The test set-up creates users and groups (CI runs as root). Clients run as those users through
``setpriv``: real uid, gid and groups — what the kernel reports to gitmd — with the one capability
(CAP_DAC_READ_SEARCH) needed to read this checkout's interpreter, which may live under /root. gitmd
decides by uid and groups only, so that capability changes nothing it sees.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gitmd.api.client_auth import open_channel
from gitmd.api.pb import pb, pb_grpc
from tests.integration.conftest import SIM_CONFIG, Daemon, command, ctl

OWNER, OTHER, READER, ADMIN = "gitmtest-a", "gitmtest-b", "gitmtest-r", "gitmtest-adm"
READ_GROUP, ADMIN_GROUP = "gitmtest-read", "gitmtest-admin"

ACCESS_CONFIG = f"""
[access]
read_group = "{READ_GROUP}"
admin_group = "{ADMIN_GROUP}"
"""

LIBRARY = {
    "format": "gitm-library",
    "version": 1,
    "workloads": [
        {
            "id": "00c0ffee0a0a",
            "name": "access-test",
            "signature": {"sequence": ["gemm"], "shares": {"gemm": 1.0}},
            "first_seen_ns": 1,
            "last_seen_ns": 2,
            "run_count": 1,
            "launch_keys": ["script:/srv/train.py"],
            "policies": [{"env": {"OMP_NUM_THREADS": "4"}, "status": "validated", "speedup": 1.1}],
        }
    ],
}


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture(scope="module")
def people() -> Iterator[dict[str, pwd.struct_passwd]]:
    if os.geteuid() != 0:
        pytest.skip("creating test users needs root (CI runs as root)")
    for tool in ("useradd", "userdel", "groupadd", "groupdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    made_groups, made_users = [], []
    for g in (READ_GROUP, ADMIN_GROUP):
        try:
            grp.getgrnam(g)
        except KeyError:
            _run("groupadd", g)
            made_groups.append(g)
    extra = {OWNER: [], OTHER: [], READER: [READ_GROUP], ADMIN: [ADMIN_GROUP]}
    for user, groups in extra.items():
        try:
            pwd.getpwnam(user)
        except KeyError:
            _run(
                "useradd",
                "-M",
                "-N",
                "-s",
                "/usr/sbin/nologin",
                *(["-G", ",".join(groups)] if groups else []),
                user,
            )
            made_users.append(user)
    yield {u: pwd.getpwnam(u) for u in extra}
    for u in made_users:
        subprocess.run(["userdel", u], capture_output=True)
    for g in made_groups:
        subprocess.run(["groupdel", g], capture_output=True)


def as_user(user: str, argv: list[str], **kw: Any) -> list[str]:
    return [
        "setpriv",
        f"--reuid={user}",
        f"--regid={pwd.getpwnam(user).pw_gid}",
        "--init-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        *argv,
    ]


@pytest.fixture(scope="module")
def acc_daemon(people: dict[str, Any]) -> Iterator[Daemon]:
    top = Path(tempfile.mkdtemp(prefix="gitmd-acc-"))
    top.chmod(0o755)  # the users must reach the sockets inside
    cfg = top / "gitmd.toml"
    cfg.write_text(SIM_CONFIG.format(port=0) + ACCESS_CONFIG)
    d = Daemon(prefix=top / "var", config=cfg).start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()
    shutil.rmtree(top, ignore_errors=True)


def tokens_of(d: Daemon, user: str, n: int) -> list[str]:
    code = (
        "import sys; from pathlib import Path; from gitmd.api.client_auth import fetch_tokens; "
        "print(' '.join(fetch_tokens(Path(sys.argv[1]), int(sys.argv[2]))))"
    )
    auth = d.socket.with_name("gitmd-auth.sock")
    r = subprocess.run(
        as_user(user, [sys.executable, "-c", code, str(auth), str(n)]),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def cli_as(d: Daemon, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_user(user, [*command("gitmctl"), "--socket", str(d.socket), *args]),
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def call(stub: Any, method: str, request: Any, token: str | None) -> grpc.StatusCode:
    md = [("gitm-token", token)] if token is not None else []
    fn = getattr(stub, method)
    try:
        result = fn(request, metadata=md, timeout=5)
        if hasattr(result, "__next__"):  # a stream: its first message, or its error
            try:
                next(result)
            except StopIteration:
                pass
            finally:
                result.cancel()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED or e.code() == grpc.StatusCode.CANCELLED:
            return grpc.StatusCode.OK  # the stream was open: it was admitted
        return e.code()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def owner_job(acc_daemon: Daemon, people: dict[str, Any]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A job of OWNER, launched by OWNER with the real `gitmctl run` and kept running."""
    d = acc_daemon
    proc = subprocess.Popen(
        as_user(
            OWNER,
            [
                *command("gitmctl"),
                "--socket",
                str(d.socket),
                "run",
                "-v",
                "--name",
                "a-job",
                "--",
                "sleep",
                "60",
            ],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    deadline = time.monotonic() + 20
    job_id = ""
    while time.monotonic() < deadline and not job_id:
        r = ctl(d.socket, "jobs", "--json", check=False)
        if r.returncode == 0:
            jobs = [j for j in json.loads(r.stdout).get("jobs", []) if j.get("name") == "a-job"]
            job_id = jobs[0]["id"] if jobs else ""
        time.sleep(0.1)
    assert job_id, proc.stderr.read() if proc.poll() is not None else "job not registered"
    yield job_id, proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def test_a_job_belongs_to_the_kernel_verified_uid(
    acc_daemon: Daemon, people: dict[str, Any], owner_job: tuple[str, Any]
) -> None:
    job_id, _ = owner_job
    job = json.loads(ctl(acc_daemon.socket, "job", job_id, "--json").stdout)
    assert job["uid"] == people[OWNER].pw_uid
    if job.get("runtime_dir"):  # the shim is built here: the ring directory is the owner's, 0700
        st = os.lstat(job["runtime_dir"])
        assert st.st_uid == people[OWNER].pw_uid and (st.st_mode & 0o777) == 0o700
    r = cli_as(acc_daemon, OWNER, "whoami", "--json")
    assert r.returncode == 0, r.stderr
    me = json.loads(r.stdout)
    assert me["uid"] == people[OWNER].pw_uid and me.get("roles", []) == []


def test_another_user_gets_nothing_of_a_job(
    acc_daemon: Daemon, people: dict[str, Any], owner_job: tuple[str, Any]
) -> None:
    d = acc_daemon
    job_id, _ = owner_job
    owner = people[OWNER]
    attempts: list[tuple[str, Any]] = [
        ("GetJob", pb.GetJobRequest(job_id=job_id)),
        ("GetAttribution", pb.GetAttributionRequest(job_id=job_id)),
        ("TraceJob", pb.TraceJobRequest(job_id=job_id, duration_s=0.1)),
        ("WatchJobs", pb.WatchJobsRequest(job_id=job_id)),
        ("WatchJobs", pb.WatchJobsRequest()),
        ("ReportJobExit", pb.ReportJobExitRequest(job_id=job_id, exit_code=1)),
        ("GetJob", pb.GetJobRequest(job_id="a-job")),
        (
            "RegisterJob",
            pb.RegisterJobRequest(name="as-a", command=["x"], uid=owner.pw_uid, gid=owner.pw_gid),
        ),
        ("GetStatus", pb.GetStatusRequest()),
        ("ListGpus", pb.ListGpusRequest()),
        ("GetTelemetry", pb.GetTelemetryRequest()),
        ("WatchTelemetry", pb.WatchTelemetryRequest()),
        ("ListWorkloads", pb.ListWorkloadsRequest()),
        ("GetWorkload", pb.GetWorkloadRequest(workload_id="00c0ffee0a0a")),
        ("ExportLibrary", pb.ExportLibraryRequest()),
        ("PinPolicy", pb.PolicyRequest(policy_id=1)),
        ("UnpinPolicy", pb.PolicyRequest(policy_id=1)),
        ("RevertPolicy", pb.PolicyRequest(policy_id=1)),
        ("ImportLibrary", pb.LibraryDocument(json=json.dumps(LIBRARY).encode())),
        ("ListAudit", pb.ListAuditRequest()),
    ]
    tokens = tokens_of(d, OTHER, len(attempts))
    with grpc.insecure_channel(f"unix:{d.socket}") as ch:
        stub = pb_grpc.GitmdStub(ch)
        codes = {
            f"{m}({str(r).strip()[:30]})": call(stub, m, r, t)
            for (m, r), t in zip(attempts, tokens, strict=True)
        }
        successes = [k for k, c in codes.items() if c == grpc.StatusCode.OK]
        assert successes == [], codes
        # A's job by its name is not B's to find: a name means one of B's own jobs, and B has none
        # of that name (hardening issue, item 8: the refusal told B of A's job and uid)
        by_name = next(k for k in codes if "a-job" in k)
        assert codes.pop(by_name) == grpc.StatusCode.NOT_FOUND
        assert set(codes.values()) == {grpc.StatusCode.PERMISSION_DENIED}, codes
        # B's job list does not show A's job; B still registers jobs as B.
        [t1, t2] = tokens_of(d, OTHER, 2)
        listed = stub.ListJobs(pb.ListJobsRequest(all=True), metadata=[("gitm-token", t1)], timeout=5)
        assert job_id not in {j.id for j in listed.jobs} and not listed.untracked
        mine = stub.RegisterJob(
            pb.RegisterJobRequest(name="b-job", command=["x"]), metadata=[("gitm-token", t2)]
        )
        assert mine.job.uid == people[OTHER].pw_uid
    # The job is untouched: still running, no exit recorded.
    job = json.loads(ctl(d.socket, "job", job_id, "--json").stdout)
    assert job["state"] in ("registered", "running"), job
    # The real CLI as B says so, with its own exit status.
    r = cli_as(d, OTHER, "explain", job_id)
    assert r.returncode == 5 and "permission denied" in r.stderr and "is not one of yours" in r.stderr
    assert f"uid {people[OWNER].pw_uid}" not in r.stderr  # the refusal names no one else
    r = cli_as(d, OTHER, "status")
    assert r.returncode == 5 and "reader role" in r.stderr
    # Every refusal is in the audit.
    audit = json.loads(ctl(d.socket, "audit", "--limit", "200", "--json").stdout)["entries"]
    denied = [
        e for e in audit if e["outcome"] == "denied" and e["actor"].startswith(f"uid {people[OTHER].pw_uid}")
    ]
    assert len(denied) >= len(attempts)


LAUNCH_PROBE = """
import json, socket, sys
from pathlib import Path
from gitmctl.errors import ClientError
from gitmctl.launch_client import call_socket

api, job_id, owner_uid = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
out = {}
def attempt(name, rpc, request):
    try:
        out[name] = call_socket(api, rpc, request, 10.0)
    except ClientError as e:
        out[name] = {"exit_code": e.exit_code, "message": str(e)}
attempt("close_owners", "ReportJobExit", {"job_id": job_id, "exit_code": 1})
attempt("as_owner", "RegisterJob", {"name": "x", "command": ["true"], "uid": owner_uid, "gid": owner_uid})
attempt("own", "RegisterJob", {"name": "mine", "command": ["true"], "cwd": "/"})
attempt("wrong_type", "RegisterJob", {"name": "x", "uid": "anyone"})
attempt("other_rpc", "ListJobs", {})
with socket.socket(socket.AF_UNIX) as s:  # not JSON
    s.connect(str(api.with_name("gitmd-launch.sock")))
    s.sendall(b"TOKENS 4\\n")
    out["garbage"] = json.loads(s.recv(65536))
attempt("own_exit", "ReportJobExit", {"job_id": out["own"].get("job_id", ""), "exit_code": 0})
print(json.dumps(out))
"""


def test_the_launch_socket_takes_the_kernels_uid_and_nothing_else(
    acc_daemon: Daemon, people: dict[str, Any], owner_job: tuple[str, Any]
) -> None:
    """`gitmctl run`'s socket (no gRPC, no token: SO_PEERCRED) admits a caller as the gRPC gate
    does: another user can neither close the owner's job nor register one as the owner; what it
    registers is its own; only the launcher's two calls are served; bad input gets an error."""
    d = acc_daemon
    job_id, _ = owner_job
    launch = d.socket.with_name("gitmd-launch.sock")
    assert os.stat(launch).st_mode & 0o777 == os.stat(d.socket).st_mode & 0o777  # the API socket's mode
    r = subprocess.run(
        as_user(
            OTHER, [sys.executable, "-c", LAUNCH_PROBE, str(d.socket), job_id, str(people[OWNER].pw_uid)]
        ),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["close_owners"]["exit_code"] == 5 and "not one of yours" in out["close_owners"]["message"]
    assert out["as_owner"]["exit_code"] == 5
    assert out["own"]["job"]["uid"] == people[OTHER].pw_uid and out["own"]["job"]["name"] == "mine"
    assert out["own"]["plan"]["env"]  # a real launch plan: the job's directory at least
    assert out["wrong_type"]["exit_code"] == 2 and "uid" in out["wrong_type"]["message"]
    assert (
        out["other_rpc"]["exit_code"] == 1
        and "RegisterJob, ReportJobExit only" in out["other_rpc"]["message"]
    )
    assert out["garbage"]["error"]["code"] == "INVALID_ARGUMENT"
    assert out["own_exit"]["id"] == out["own"]["job_id"] and out["own_exit"]["state"] == "exited"
    job = json.loads(ctl(d.socket, "job", job_id, "--json").stdout)
    assert job["state"] in ("registered", "running")  # the owner's job was not closed by the other user


def test_owner_reader_and_admin(
    acc_daemon: Daemon, people: dict[str, Any], owner_job: tuple[str, Any]
) -> None:
    d = acc_daemon
    job_id, _ = owner_job
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "library", "import", "-"],
        input=json.dumps(LIBRARY),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    policy_id = json.loads(ctl(d.socket, "library", "show", "00c0ffee0a0a", "--json").stdout)["policies"][0][
        "id"
    ]
    with grpc.insecure_channel(f"unix:{d.socket}") as ch:
        stub = pb_grpc.GitmdStub(ch)
        own = tokens_of(d, OWNER, 4)
        assert call(stub, "GetJob", pb.GetJobRequest(job_id=job_id), own[0]) == grpc.StatusCode.OK
        assert call(stub, "GetAttribution", pb.GetAttributionRequest(job_id=job_id), own[1]) in (
            grpc.StatusCode.OK,
            grpc.StatusCode.NOT_FOUND,  # admitted; no window captured (no shim or no CUDA here)
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert call(stub, "PinPolicy", pb.PolicyRequest(policy_id=int(policy_id)), own[2]) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        rd = tokens_of(d, READER, 4)
        assert call(stub, "GetStatus", pb.GetStatusRequest(), rd[0]) == grpc.StatusCode.OK
        assert call(stub, "GetJob", pb.GetJobRequest(job_id=job_id), rd[1]) == grpc.StatusCode.OK
        assert call(stub, "GetAttribution", pb.GetAttributionRequest(job_id=job_id), rd[2]) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        assert call(stub, "PinPolicy", pb.PolicyRequest(policy_id=int(policy_id)), rd[3]) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        ad = tokens_of(d, ADMIN, 2)
        assert (
            call(stub, "PinPolicy", pb.PolicyRequest(policy_id=int(policy_id)), ad[0]) == grpc.StatusCode.OK
        )
        assert (
            call(stub, "UnpinPolicy", pb.PolicyRequest(policy_id=int(policy_id)), ad[1]) == grpc.StatusCode.OK
        )
    r = cli_as(d, READER, "jobs", "--json")
    assert r.returncode == 0 and job_id in r.stdout


def test_forged_replayed_and_missing_tokens_are_refused(acc_daemon: Daemon, people: dict[str, Any]) -> None:
    d = acc_daemon
    [good, spare] = tokens_of(d, READER, 2)
    body, mac = good[3:].split(".")
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    # A body claiming root, with the reader's mac: the mac no longer matches.
    forged_body = body[:4] + ("A" if body[4] != "A" else "B") + body[5:]
    with grpc.insecure_channel(f"unix:{d.socket}") as ch:
        stub = pb_grpc.GitmdStub(ch)
        status = pb.GetStatusRequest()
        for bad in (
            None,
            "",
            "garbage",
            f"v1.{body}.{flipped}",
            f"v1.{forged_body}.{mac}",
            "v1." + "A" * 5000,
        ):
            assert call(stub, "GetStatus", status, bad) == grpc.StatusCode.UNAUTHENTICATED, bad
        assert call(stub, "GetStatus", status, spare) == grpc.StatusCode.OK
        assert call(stub, "GetStatus", status, spare) == grpc.StatusCode.UNAUTHENTICATED  # replayed
        try:
            stub.GetStatus(status, metadata=[("gitm-token", good), ("gitm-token", good)], timeout=5)
            raise AssertionError("two tokens must be refused")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAUTHENTICATED
    audit = json.loads(ctl(d.socket, "audit", "--json").stdout)["entries"]
    assert any(e["outcome"] == "unauthenticated" and "forged" in e["detail"] for e in audit)
    assert any(e["outcome"] == "unauthenticated" and "replayed" in e["detail"] for e in audit)


def test_tokens_die_with_the_daemon(acc_daemon: Daemon, people: dict[str, Any], short_tmp: Path) -> None:
    """A token minted by one gitmd is refused by the next (a new secret per start)."""
    cfg = short_tmp / "g.toml"
    cfg.write_text(SIM_CONFIG.format(port=0) + ACCESS_CONFIG)
    other = Daemon(prefix=short_tmp / "var", config=cfg).start()
    try:
        [token] = tokens_of(acc_daemon, READER, 1)
        with grpc.insecure_channel(f"unix:{other.socket}") as ch:
            code = call(pb_grpc.GitmdStub(ch), "GetStatus", pb.GetStatusRequest(), token)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        with open_channel(other.socket) as ch:  # root, with its own tokens: fine
            pb_grpc.GitmdStub(ch).GetStatus(pb.GetStatusRequest(), timeout=5)
    finally:
        other.stop()


_FLOOD = """
import sys, threading, time
import grpc
from gitmd.api.client_auth import open_channel
from gitmd.api.pb import pb, pb_grpc
sock, seconds = sys.argv[1], float(sys.argv[2])
codes = {}
lock = threading.Lock()
def hammer():
    stub = pb_grpc.GitmdStub(open_channel(sock))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            stub.ListJobs(pb.ListJobsRequest(all=True), timeout=10)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
        with lock:
            codes[code] = codes.get(code, 0) + 1
threads = [threading.Thread(target=hammer) for _ in range(32)]
for t in threads: t.start()
for t in threads: t.join()
print(" ".join(f"{k}={v}" for k, v in sorted(codes.items())))
"""


def test_roots_status_answers_within_a_second_while_a_user_floods_gitmd(
    acc_daemon: Daemon, people: dict[str, Any]
) -> None:
    """Hardening issue, item 4 and the issue's test: a user's 32 threads calling as fast as they can
    held gRPC's workers; root's status must answer within 1 s whatever one user does. The user's
    calls beyond 4 in flight are refused (RESOURCE_EXHAUSTED), never queued behind root's."""
    d = acc_daemon
    flood = subprocess.Popen(
        as_user(OTHER, [sys.executable, "-c", _FLOOD, str(d.socket), "8"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    try:
        time.sleep(2.0)  # the flood is on
        stub = pb_grpc.GitmdStub(open_channel(d.socket))
        waits = []
        for _ in range(10):
            t0 = time.monotonic()
            stub.GetStatus(pb.GetStatusRequest(), timeout=5)
            waits.append(time.monotonic() - t0)
            time.sleep(0.2)
        out, err = flood.communicate(timeout=60)
    finally:
        if flood.poll() is None:
            flood.kill()
    assert flood.returncode == 0, err
    print(f"flood: {out.strip()}; root's GetStatus waits (s): {[round(w, 3) for w in waits]}")
    assert max(waits) < 1.0, (waits, out)
    assert "RESOURCE_EXHAUSTED=" in out and "OK=" in out, out


_FILL = """
import sys, time
import grpc
from gitmd.api.client_auth import open_channel
from gitmd.api.pb import pb, pb_grpc
sock, seconds = sys.argv[1], float(sys.argv[2])
stub = pb_grpc.GitmdStub(open_channel(sock))
arg = "x" * (900 << 10)
ok = refused = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        req = pb.RegisterJobRequest(command=["python", arg], cwd="/tmp", capture=False)
        r = stub.RegisterJob(req, timeout=10)
        stub.ReportJobExit(pb.ReportJobExitRequest(job_id=r.job_id, exit_code=0), timeout=10)
        ok += 1
    except grpc.RpcError as e:
        refused += 1
print(f"registered={ok} refused={refused} mib={ok * 900 / 1024:.0f}")
"""


def test_a_user_filling_the_store_is_held_to_stored_bytes_per_user(
    people: dict[str, Any], short_tmp: Path
) -> None:
    """Hardening issue: per-user stored bytes. A user registering 900-KiB commands in a loop (each
    job ended at once) wrote them into the store until keep_days passed (90 days). With
    daemon.stored_bytes_per_user at 16 MiB their rows never hold more: their oldest ended jobs go,
    their registrations go on, and another user's jobs stay."""
    import sqlite3

    top = Path(tempfile.mkdtemp(prefix="gitmd-fill-"))
    top.chmod(0o755)
    cfg = top / "gitmd.toml"
    cfg.write_text(SIM_CONFIG.format(port=0) + "\n[daemon]\nstored_bytes_per_user = 16777216\n")
    d = Daemon(prefix=top / "var", config=cfg).start()
    try:
        mine = cli_as(d, OWNER, "run", "--no-capture", "--", "true")
        assert mine.returncode == 0, mine.stderr
        r = subprocess.run(
            as_user(OTHER, [sys.executable, "-c", _FILL, str(d.socket), "8"]),
            capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).resolve().parents[2]),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        db = sqlite3.connect(f"file:{d.prefix / 'lib' / 'gitmd.db'}?mode=ro", uri=True)
        uid = people[OTHER].pw_uid
        held = db.execute("SELECT bytes FROM user_bytes WHERE uid = ?", [uid]).fetchone()[0]
        rows = db.execute("SELECT COUNT(*), SUM(length(command)) FROM jobs WHERE uid = ?", [uid]).fetchone()
        owner_jobs = db.execute("SELECT COUNT(*) FROM jobs WHERE uid = ?", [people[OWNER].pw_uid]).fetchone()[
            0
        ]
        print(
            f"fill: {r.stdout.strip()}; held {held / 2**20:.1f} MiB in {rows[0]} jobs; owner's {owner_jobs}"
        )
        registered = int(r.stdout.split()[0].split("=")[1])
        assert registered > 18  # more than the cap's worth went through: the oldest made room
        assert (16 << 20) - (1 << 20) <= held <= 16 << 20 and rows[1] <= held  # just the oldest went
        assert owner_jobs == 1  # another user's job is not touched
    finally:
        d.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_a_workload_contract_is_each_users_consent_for_their_own_runs(
    acc_daemon: Daemon, people: dict[str, Any]
) -> None:
    """`gitmctl library contract` (convergence issue, item 4) holds the caller's later runs of a
    workload to a number they print. Consent is a user's for their own runs: another user's contract
    on the same workload never reaches the owner's runs (a review found the first version let any
    user whose runs matched a shared workload set the contract every run got), and what a user sets
    is theirs alone to see and clear."""
    from gitmd.jobs.launch_key import owned

    d = acc_daemon
    doc = json.loads(json.dumps(LIBRARY))
    w = doc["workloads"][0]
    w["id"], w["name"] = "00c0ffee0b0b", "owned-by-owner"
    w["launch_keys"] = [owned(people[OWNER].pw_uid, "script:/srv/owned.py")]
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "library", "import", "-"],
        input=json.dumps(doc), capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = cli_as(d, OTHER, "library", "contract", "00c0ffee0b0b", "--metric", r"loss=(\S+)", "--json")
    assert r.returncode == 0, r.stderr
    assert [c["kind"] for c in json.loads(r.stdout)["checks"]] == ["stdout_metric", "exit_status"]
    r = cli_as(d, OWNER, "library", "contract", "00c0ffee0b0b", "--json")
    assert r.returncode == 0 and not json.loads(r.stdout).get("checks"), r.stdout  # not the owner's
    r = cli_as(d, OWNER, "library", "contract", "00c0ffee0b0b", "--metric", r"acc=(\S+)")
    assert r.returncode == 0 and "acc=" in r.stdout, r.stderr
    r = cli_as(d, OTHER, "library", "contract", "00c0ffee0b0b", "--clear")
    assert r.returncode == 0, r.stderr
    r = cli_as(d, OWNER, "library", "contract", "00c0ffee0b0b", "--json")
    assert [c["regex"] for c in json.loads(r.stdout)["checks"]][:1] == [r"acc=(\S+)"]  # untouched
    r = cli_as(d, OTHER, "library", "contract", "ffffffffffff", "--metric", r"x=(\S+)")
    assert r.returncode == 4 and "no workload" in r.stderr


def test_a_scheduler_jobs_id_is_its_users_to_tag_jobs_with(
    acc_daemon: Daemon, people: dict[str, Any]
) -> None:
    """Hardening issue, item 8: any user could tag their jobs with any Slurm id. Once the scheduler
    has said for whom it started a job (its Prolog's ReportSchedulerJob "start"), only that user may
    register jobs under its id; an id the scheduler never spoke of stays free text."""
    d = acc_daemon
    owner, other = people[OWNER], people[OTHER]
    with open_channel(d.socket) as ch:  # root: acts for users, as the Prolog does
        pb_grpc.GitmdStub(ch).ReportSchedulerJob(
            pb.SchedulerJobEvent(scheduler_job_id="slurm-900", event="start", uid=owner.pw_uid), timeout=10
        )
    toks = tokens_of(d, OTHER, 2) + tokens_of(d, OWNER, 1)
    with grpc.insecure_channel(f"unix:{d.socket}") as ch:  # each call as the user its token names
        stub = pb_grpc.GitmdStub(ch)
        req = pb.RegisterJobRequest(name="tagged", command=["x"], scheduler_job_id="slurm-900")
        assert call(stub, "RegisterJob", req, toks[0]) == grpc.StatusCode.PERMISSION_DENIED
        free = pb.RegisterJobRequest(name="tagged", command=["x"], scheduler_job_id="slurm-901")
        assert call(stub, "RegisterJob", free, toks[1]) == grpc.StatusCode.OK
        assert call(stub, "RegisterJob", req, toks[2]) == grpc.StatusCode.OK
    listed = json.loads(ctl(d.socket, "jobs", "--all", "--json").stdout)["jobs"]
    mine = sorted((j["scheduler_job_id"], j["uid"]) for j in listed if j["name"] == "tagged")
    assert mine == [("slurm-900", owner.pw_uid), ("slurm-901", other.pw_uid)]
