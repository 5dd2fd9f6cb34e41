"""The remote listener: TCP exists only with mutual TLS; certificate subjects map to roles.

Certificates are made for the test with the openssl command line (a CA, the server, clients).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gitmd.api.pb import pb, pb_grpc
from tests.integration.conftest import SIM_CONFIG, Daemon, ctl, free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}", "-days", "2", cwd=d,
    )  # fmt: skip


def make_cert(d: Path, ca: str, name: str, cn: str, server: bool = False) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d,
    )  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        if server
        else "extendedKeyUsage=clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", ext.name, cwd=d,
    )  # fmt: skip


@pytest.fixture
def tls_daemon(short_tmp: Path) -> Iterator[tuple[Daemon, Path, int]]:
    certs = short_tmp / "certs"
    certs.mkdir()
    make_ca(certs, "ca")
    make_ca(certs, "rogue-ca")
    make_cert(certs, "ca", "server", "localhost", server=True)
    make_cert(certs, "ca", "sched", "slurm-ctl")
    make_cert(certs, "ca", "stranger", "nobody-knows-me")
    make_cert(certs, "rogue-ca", "rogue", "slurm-ctl")
    port = free_port()
    cfg = short_tmp / "gitmd.toml"
    cfg.write_text(
        SIM_CONFIG.format(port=0)
        + f"""
[remote]
listen = "127.0.0.1:{port}"
cert = "{certs / "server.pem"}"
key = "{certs / "server.key"}"
client_ca = "{certs / "ca.pem"}"
subjects = {{ "slurm-ctl" = "scheduler" }}
"""
    )
    d = Daemon(prefix=short_tmp / "tls", config=cfg).start()
    yield d, certs, port
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()


def channel(certs: Path, port: int, client: str | None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / f"{client}.key").read_bytes() if client else None,
        certificate_chain=(certs / f"{client}.pem").read_bytes() if client else None,
    )
    return grpc.secure_channel(f"localhost:{port}", creds)


def test_a_scheduler_certificate_registers_for_a_user(tls_daemon: tuple[Daemon, Path, int]) -> None:
    d, certs, port = tls_daemon
    with channel(certs, port, "sched") as ch:
        stub = pb_grpc.GitmdStub(ch)
        me = stub.WhoAmI(pb.WhoAmIRequest(), timeout=10)
        assert me.name == "tls:slurm-ctl" and set(me.roles) == {"scheduler", "reader"}
        assert not me.HasField("uid")
        r = stub.RegisterJob(
            pb.RegisterJobRequest(
                name="slurm-42", command=["train"], uid=4321, gid=4321, scheduler_job_id="42"
            ),
            timeout=10,
        )
        assert r.job.uid == 4321 and r.job.scheduler_job_id == "42"
        stub.ReportJobExit(pb.ReportJobExitRequest(job_id=r.job_id, exit_code=0), timeout=10)
        with pytest.raises(grpc.RpcError) as e:
            stub.PinPolicy(pb.PolicyRequest(policy_id=1), timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    audit = json.loads(ctl(d.socket, "audit", "--slurm-job", "42", "--json").stdout)["entries"]
    assert {(e["actor"], e["action"]) for e in audit} == {
        ("tls:slurm-ctl", "RegisterJob"),
        ("tls:slurm-ctl", "ReportJobExit"),
    }


def test_unknown_subjects_no_certificate_and_foreign_cas_are_refused(
    tls_daemon: tuple[Daemon, Path, int],
) -> None:
    d, certs, port = tls_daemon
    with channel(certs, port, "stranger") as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.GitmdStub(ch).GetStatus(pb.GetStatusRequest(), timeout=10)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "no role" in (e.value.details() or "")
    for client in (None, "rogue"):  # the handshake itself fails: no call reaches the service
        with channel(certs, port, client) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.GitmdStub(ch).GetStatus(pb.GetStatusRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:  # plaintext on the TLS port
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.GitmdStub(ch).GetStatus(pb.GetStatusRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert d.proc is not None and d.proc.poll() is None


def listening_tcp_sockets(pid: int) -> set[str]:
    """Inodes of the process's sockets that listen on TCP."""
    fds = Path(f"/proc/{pid}/fd")
    mine = set()
    for fd in fds.iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    listening = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A":  # TCP_LISTEN
                listening.add(cols[9])
    return mine & listening


def test_no_tcp_listener_by_default(daemon: Daemon, tls_daemon: tuple[Daemon, Path, int]) -> None:
    status = json.loads(ctl(daemon.socket, "status", "--config", "--json").stdout)
    assert status["config"]["remote.listen"] == ""
    assert daemon.proc is not None and listening_tcp_sockets(daemon.proc.pid) == set()
    tls, _, _ = tls_daemon  # the check itself sees a listener where there is one
    assert tls.proc is not None and len(listening_tcp_sockets(tls.proc.pid)) >= 1
