"""The launch socket's answer to a connection beyond PeerServer's limits, and what the launcher
makes of it: an error line it can say (gitmd busy), not a close it reads as "gitmd is not running".
The limits are set to nothing here, so that every connection is one too many."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import gitmd.auth.peer
from gitmctl.errors import EXIT_UNAVAILABLE, ClientError
from gitmctl.launch_client import call
from gitmd.api.launch_socket import LaunchServer
from gitmd.api.sockets import launch_socket_for


@pytest.fixture
def full(monkeypatch: pytest.MonkeyPatch) -> Iterator[LaunchServer]:
    """A launch socket whose every handler slot is taken (root's reserved ones too)."""
    monkeypatch.setattr(gitmd.auth.peer, "PER_USER", 0)
    monkeypatch.setattr(gitmd.auth.peer, "ROOT_RESERVED", 0)
    with tempfile.TemporaryDirectory(prefix="gitm-launch-") as d:
        # never reached: a refused connection is answered before it is read
        srv = LaunchServer(launch_socket_for(Path(d) / "gitmd.sock"), cast(Any, None), cast(Any, None), 0o666)
        srv.start()
        yield srv
        srv.stop()


def test_a_connection_beyond_the_limits_is_answered_resource_exhausted(full: LaunchServer) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(full.path))
        got = b""
        while not got.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    answer = json.loads(got)
    assert answer["error"]["code"] == "RESOURCE_EXHAUSTED" and "at once" in answer["error"]["message"]
    assert full.refused >= 1


def test_the_launcher_says_gitmd_is_busy_and_runs_the_command_untraced(full: LaunchServer) -> None:
    api = full.path.with_name("gitmd.sock")
    with pytest.raises(ClientError, match="a limit was reached: gitmd is serving as many") as e:
        call(api, "RegisterJob", {"name": "x"}, 5.0)
    assert e.value.exit_code == EXIT_UNAVAILABLE
    r = subprocess.run(
        [sys.executable, "-m", "gitmctl", "--socket", str(api), "run", "--", "sh", "-c", "exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    assert "refused, a limit was reached: gitmd is serving as many launchers" in r.stderr
    assert "running the command untraced" in r.stderr and "not running" not in r.stderr


def test_a_slow_exchange_is_logged_by_the_rpc_its_line_names() -> None:
    from gitmd.api.launch_socket import _rpc_named

    assert _rpc_named(b'{"rpc":"ReportJobExit","request":{}}\n') == "ReportJobExit"
    assert _rpc_named(b'{"rpc":"DropTables","request":{}}\n') == "a call"  # never echoes a caller's name
    assert _rpc_named(b"not json\n") == "a call" and _rpc_named(b"[1]\n") == "a call"
