"""The credential socket, for real: the kernel's answer about this very test process."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmd.api.client_auth import CredentialError, TokenSource, fetch_tokens
from gitmd.auth.peer import CredentialServer
from gitmd.auth.tokens import TokenAuthority


@pytest.fixture
def server() -> Iterator[CredentialServer]:
    with tempfile.TemporaryDirectory(prefix="gitm-cred-") as d:
        srv = CredentialServer(Path(d) / "auth.sock", TokenAuthority())
        srv.start()
        yield srv
        srv.stop()


def test_tokens_carry_the_kernels_credentials(server: CredentialServer) -> None:
    assert (os.stat(server.path).st_mode & 0o777) == 0o666
    tokens = fetch_tokens(server.path, 3)
    assert len(set(tokens)) == 3
    peer = server.authority.redeem(tokens[0])
    assert (peer.uid, peer.gid, peer.pid) == (os.getuid(), os.getgid(), os.getpid())
    assert set(os.getgroups()) <= peer.groups


def test_bad_requests_and_silent_clients(server: CredentialServer) -> None:
    for line in (b"HELLO\n", b"TOKENS 0\n", b"TOKENS 65\n", b"TOKENS -1\n", b"\xff\xfe\n"):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(server.path))
            s.sendall(line)
            assert s.recv(1000).startswith(b"ERR")
    with socket.socket(socket.AF_UNIX) as s:  # says nothing: dropped after a second
        s.connect(str(server.path))
        t = time.monotonic()
        assert s.recv(100) in (b"", b"ERR expected 'TOKENS <n>'\n")
        assert time.monotonic() - t < 5
    assert len(fetch_tokens(server.path, 1)) == 1  # still serving


def test_source_pools_and_refetches(server: CredentialServer) -> None:
    now = [0.0]
    src = TokenSource(server.path, batch=4, clock=lambda: now[0])
    got = [src.take() for _ in range(6)]
    assert len(set(got)) == 6
    now[0] += 3600  # the pooled ones are stale: new ones are fetched
    server.authority.redeem(src.take())


def test_no_daemon_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match="no credential socket"):
        fetch_tokens(tmp_path / "nothing.sock")


def test_slow_and_idle_clients_cannot_hold_the_credential_socket(server: CredentialServer) -> None:
    """Hardening issue, item 4: slow clients held a thread each (2,951 threads; with TasksMax=1024
    gitmd could start none). An exchange lasts at most DEADLINE_S however slowly its bytes come,
    and at most MAX_HANDLERS run at once: the next connection is closed at once, and tokens flow
    again as soon as the slow ones are cut."""
    from gitmd.auth.peer import DEADLINE_S, MAX_HANDLERS

    slow = socket.socket(socket.AF_UNIX)
    slow.connect(str(server.path))
    t = time.monotonic()
    for b in b"TOKENS 1 2 3":  # a byte every 0.5 s (6 s in all): cut at the deadline
        try:
            slow.sendall(bytes([b]))
        except OSError:
            break
        time.sleep(0.5)
    slow.settimeout(5)
    try:
        got = slow.recv(100)
    except ConnectionResetError:  # cut with our last byte still unread in its queue: the same cut
        got = b""
    assert got == b"" and time.monotonic() - t < DEADLINE_S + 2.5
    slow.close()
    idle = []
    for _ in range(MAX_HANDLERS):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(server.path))
        idle.append(s)
    time.sleep(0.3)  # every handler is waiting on one of them
    with socket.socket(socket.AF_UNIX) as extra:
        extra.connect(str(server.path))
        extra.settimeout(1.0)
        assert extra.recv(100) == b""  # closed at once, no thread for it
    assert server.refused >= 1
    time.sleep(DEADLINE_S + 0.5)  # the idle ones are cut
    for s in idle:
        s.close()
    assert len(fetch_tokens(server.path, 1)) == 1


HOLDER = """
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    held.append(s)
time.sleep(0.5)
served = cut = 0
for s in held:
    s.setblocking(False)
    try:
        cut += s.recv(100) == b""  # closed at once: refused
    except BlockingIOError:
        served += 1  # a handler is waiting on it
print(served, cut, flush=True)
time.sleep(1.0)
"""


def test_one_user_cannot_take_every_credential_slot(server: CredentialServer) -> None:
    """Hardening issue (root's `gitmctl status` within 1 s while a user does their worst): a user
    holding idle connections got every one of the MAX_HANDLERS slots, and root got no token. One
    uid's exchanges are held to PER_USER at once, and root keeps ROOT_RESERVED of its own."""
    import shutil
    import subprocess
    import sys

    from gitmd.auth.peer import PER_USER

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to connect as another user")
    os.chmod(server.path.parent, 0o755)  # the socket itself is 0666, as installed
    holder = subprocess.Popen(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", HOLDER,
         str(server.path), str(PER_USER + 12)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        served, cut = map(int, holder.stdout.readline().split())
        assert (served, cut) == (PER_USER, 12)
        t = time.monotonic()
        assert len(fetch_tokens(server.path, 1)) == 1 and time.monotonic() - t < 1.0  # root is served
    finally:
        holder.kill()
        holder.wait()
