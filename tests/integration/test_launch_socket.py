"""`gitmctl run`'s way to gitmd without gRPC (gitmd/api/launch_socket.py), against the real daemon
over its real sockets with the real CLI: the launch path imports neither grpc nor protobuf, a
daemon without the socket is reached by gRPC all the same, and bad input on the socket gets an
error while it goes on serving. Access (whose uid a launch is) is in test_access.py."""

from __future__ import annotations

import grp
import json
import os
import socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import SIM_CONFIG, Daemon, command, ctl_json


def launch(d: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command("gitmctl"), "--socket", str(d.socket), "run", "-v", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def exchange(d: Daemon, data: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(d.socket.with_name("gitmd-launch.sock")))
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # it answered and closed before taking the
            pass  # rest (or refused the connection): the answer is there
        got = b""
        while not got.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return json.loads(got)  # type: ignore[no-any-return]


def test_run_imports_no_grpc_and_registers_by_the_launch_socket(daemon: Daemon) -> None:
    """The launcher's imports, as the interpreter lists them (PYTHONPROFILEIMPORTTIME): no grpc, no
    protobuf; the job registered and its exit was reported all the same."""
    argv = [*command("gitmctl"), "--socket", str(daemon.socket), "run", "-v", "--name", "lean", "--", "true"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")
    ]
    assert imported and "gitmctl.launch_client" in imported
    assert not [m for m in imported if m.split(".")[0] == "grpc" or m.startswith("google.protobuf")], imported
    jobs = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert [(j["name"], j["state"], j["exit_code"]) for j in jobs] == [("lean", "exited", 0)]


def test_a_daemon_without_the_launch_socket_is_reached_by_grpc(daemon: Daemon) -> None:
    daemon.socket.with_name("gitmd-launch.sock").unlink()  # as an older gitmd serves no launch socket
    r = launch(daemon, "--name", "by-grpc", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    assert "running the command untraced" not in r.stderr and "gitmctl run: job " in r.stderr
    jobs = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert [(j["name"], j["state"], j["exit_code"]) for j in jobs] == [("by-grpc", "exited", 3)]


def test_bad_input_on_the_launch_socket_gets_an_error_and_it_serves_on(daemon: Daemon) -> None:
    from gitmd.api.launch_socket import MAX_REQUEST_BYTES
    from gitmd.auth.peer import DEADLINE_S

    not_json = exchange(daemon, b"{not json\n")
    assert not_json["error"]["code"] == "INVALID_ARGUMENT"  # type: ignore[index]
    assert "line 1 column 2" in not_json["error"]["message"]  # type: ignore[index]  # where it failed
    assert exchange(daemon, b'{"rpc": "RegisterJob"}\n')["error"]["code"] == "INVALID_ARGUMENT"  # type: ignore[index]
    wrong = b'{"rpc": "RegisterJob", "request": {"gpus": "all"}}\n'
    assert exchange(daemon, wrong)["error"]["code"] == "INVALID_ARGUMENT"  # type: ignore[index]
    deep = exchange(daemon, b"[" * 100_000 + b"\n")  # nested past the parser's recursion
    assert deep["error"]["code"] == "INVALID_ARGUMENT"  # type: ignore[index]
    assert deep["error"]["message"] == "not JSON: nested too deeply"  # type: ignore[index]
    big = exchange(daemon, b"x" * (MAX_REQUEST_BYTES + 1))  # no newline, more than a request may be
    assert big["error"]["code"] == "RESOURCE_EXHAUSTED"  # type: ignore[index]
    # a client that says nothing is dropped once the request's deadline has passed
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(DEADLINE_S + 5)
        s.connect(str(daemon.socket.with_name("gitmd-launch.sock")))
        t0 = time.monotonic()
        assert s.recv(65536) == b""
        assert time.monotonic() - t0 < DEADLINE_S + 3
    r = launch(daemon, "--name", "after", "--", "true")
    assert r.returncode == 0 and "gitmctl run: job " in r.stderr, r.stderr
    jobs = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert [j["name"] for j in jobs] == ["after"]


def test_a_metric_that_is_not_finite_is_reported_with_the_exit(daemon: Daemon) -> None:
    """ "nan" and "inf" are numbers to the metric scan; JSON has no such literal, so they travel as
    protobuf's JSON mapping writes them, and the exit is reported (it was refused as bad JSON)."""
    r = launch(
        daemon, "--name", "nan", "--metric", "v=(\\S+)", "--", "sh", "-c", "echo v=nan; echo v=inf; exit 4"
    )
    assert r.returncode == 4, r.stderr
    assert "could not report" not in r.stderr
    jobs = ctl_json(daemon.socket, "jobs", "--all")["jobs"]
    assert [(j["name"], j["state"], j["exit_code"]) for j in jobs] == [("nan", "exited", 4)]


def test_without_gitmd_the_launcher_says_so_without_importing_grpc(short_tmp: Path) -> None:
    """Neither socket there: "gitmd is not running" as the gRPC client says it, and the command
    runs untraced, without grpc's import (~0.2 s on every launch while gitmd is down)."""
    argv = [*command("gitmctl"), "--socket", str(short_tmp / "gitmd.sock"), "run", "--", "sh", "-c", "exit 3"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 3, r.stderr
    said = [line for line in r.stderr.splitlines() if line.startswith("gitmctl run: ")]
    assert said == [
        f"gitmctl run: gitmd is not running or not reachable at {short_tmp / 'gitmd.sock'} (no socket "
        "there).; running the command untraced"
    ], r.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")
    ]
    assert "gitmctl.launch_client" in imported
    assert not [m for m in imported if m.split(".")[0] == "grpc" or m.startswith("google.protobuf")], imported


def test_a_launch_socket_path_too_long_for_a_unix_socket_is_left_out(short_tmp: Path) -> None:
    """The API socket fits (101 bytes, the credential socket's 106 too), the launch socket's 108 do
    not: gitmd starts and serves all the same, says why there is no launch socket, and `gitmctl run`
    registers by gRPC (the launch socket's StartupError came after the gRPC server had started)."""
    room = 100 - len(os.fsencode(short_tmp / "var" / "run" / "gitmd.sock"))  # and its "/"
    prefix = short_tmp / ("v" * room) / "var"
    cfg = short_tmp / "gitmd.toml"
    cfg.write_text(SIM_CONFIG.format(port=0))
    prefix.parent.mkdir()
    d = Daemon(prefix=prefix, config=cfg)
    assert len(os.fsencode(d.socket)) == 101
    try:
        d.start()
        assert not d.socket.with_name("gitmd-launch.sock").exists()
        assert "serving no launch socket" in d.log()
        r = launch(d, "--name", "long", "--", "sh", "-c", "exit 3")
        assert r.returncode == 3, r.stderr
        assert "running the command untraced" not in r.stderr and "gitmctl run: job " in r.stderr
        jobs = ctl_json(d.socket, "jobs", "--all")["jobs"]
        assert [(j["name"], j["state"], j["exit_code"]) for j in jobs] == [("long", "exited", 3)]
        assert d.stop() == 0
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def test_a_connection_beyond_the_launch_sockets_limits_gets_an_error_line(daemon: Daemon) -> None:
    """One uid's idle connections fill its handler slots: the next is told RESOURCE_EXHAUSTED at
    once, so that the launcher says gitmd is busy (it read a close as "gitmd is not running")."""
    from gitmd.auth.peer import PER_USER, ROOT_RESERVED

    mine = PER_USER + (ROOT_RESERVED if os.geteuid() == 0 else 0)
    held = []
    try:
        for _ in range(mine):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(daemon.socket.with_name("gitmd-launch.sock")))
            held.append(s)
        time.sleep(0.3)  # a handler waits on each
        answer = exchange(daemon, b'{"rpc": "RegisterJob", "request": {}}\n')
        assert answer["error"]["code"] == "RESOURCE_EXHAUSTED", answer  # type: ignore[index]
        assert "at once" in answer["error"]["message"]  # type: ignore[index]
    finally:
        for s in held:
            s.close()


def test_the_launch_socket_has_the_api_sockets_group_and_mode(daemon_factory: Any) -> None:
    """``daemon.socket_group`` and ``socket_mode`` are the launch socket's too: whoever may not reach
    the API may not launch through it. A group this process may give a file it owns: any but its own
    for root, else one of its supplementary groups."""
    own = os.getegid()
    if os.geteuid() == 0:
        others = [g for g in grp.getgrall() if g.gr_gid != own]
    else:
        others = [grp.getgrgid(g) for g in os.getgroups() if g != own]
    if not others:
        pytest.skip("no group to give the sockets other than this process's own")
    group = others[0]
    config = SIM_CONFIG.format(port=0) + f'[daemon]\nsocket_mode = "0660"\nsocket_group = "{group.gr_name}"\n'
    d = daemon_factory(config_text=config)
    api = os.stat(d.socket)
    launch_st = os.stat(d.socket.with_name("gitmd-launch.sock"))
    assert (stat.S_IMODE(api.st_mode), api.st_gid) == (0o660, group.gr_gid)
    assert (stat.S_IMODE(launch_st.st_mode), launch_st.st_gid) == (0o660, group.gr_gid)
    r = launch(d, "--name", "grouped", "--", "true")
    assert r.returncode == 0 and "gitmctl run: job " in r.stderr, r.stderr
