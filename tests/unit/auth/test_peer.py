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
