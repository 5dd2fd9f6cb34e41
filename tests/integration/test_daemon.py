"""The real daemon over its real Unix socket, driven by the real gitmctl and a plain gRPC client."""

from __future__ import annotations

import signal
import socket
import stat
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gitmd.api.client_auth import open_channel
from tests.integration.conftest import Daemon, command, ctl, ctl_json, free_port


def test_status_gpus_and_telemetry_through_the_cli(daemon: Daemon) -> None:
    st = ctl_json(daemon.socket, "status")
    assert st["backend"] == "sim" and st["gpu_count"] == 2
    assert st["socket_path"] == str(daemon.socket)
    assert st["config"]["telemetry.interval_s"] == "0.2"

    gpus = ctl_json(daemon.socket, "gpus")["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["uuid"] == "GPU-sim-0000-0000"

    latest = ctl_json(daemon.socket, "telemetry")["samples"]
    assert [s["gpu_index"] for s in latest] == [0, 1]
    assert latest[0]["processes"][0]["pid"] == 4242
    assert latest[1]["clock_event_reasons"] == ["hw_thermal_slowdown"]

    time.sleep(1.0)
    ranged = ctl_json(daemon.socket, "telemetry", "--gpu", "1", "--since", "30s")["samples"]
    assert len(ranged) >= 4 and {s["gpu_index"] for s in ranged} == {1}
    stamps = [int(s["ts_unix_ns"]) for s in ranged]
    assert stamps == sorted(stamps)

    human = ctl(daemon.socket, "telemetry").stdout
    assert "hw_thermal_slowdown" in human and "pid 4242 train.py" in human
    assert "Simulated H200" in ctl(daemon.socket, "gpus").stdout


def test_watch_streams_new_samples(daemon: Daemon) -> None:
    proc = subprocess.Popen(
        [
            *command("gitmctl"),
            "--socket",
            str(daemon.socket),
            "telemetry",
            "--watch",
            "--gpu",
            "0",
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.terminate()
    proc.wait(5)
    import json

    samples = [json.loads(line) for line in lines]
    assert [s["gpu_index"] for s in samples] == [0, 0, 0]
    assert len({s["ts_unix_ns"] for s in samples}) == 3


def test_bad_input_is_a_clear_error(daemon: Daemon) -> None:
    r = ctl(daemon.socket, "telemetry", "--gpu", "9", check=False)
    assert r.returncode == 4 and "no GPU with index 9" in r.stderr
    r = ctl(daemon.socket, "telemetry", "--watch", "--gpu", "9", check=False)
    assert r.returncode == 4 and "no GPU with index 9" in r.stderr
    r = ctl(daemon.socket, "telemetry", "--since", "yesterday", check=False)
    assert r.returncode == 2 and "not a duration" in r.stderr
    with open_channel(daemon.socket) as ch:
        from gitmd.api.pb import pb, pb_grpc

        stub = pb_grpc.GitmdStub(ch)
        try:
            stub.GetTelemetry(pb.GetTelemetryRequest(since_unix_ns=10, until_unix_ns=5), timeout=5)
            raise AssertionError("must fail")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "must be after" in (e.details() or "")


def test_health_and_reflection_answer(daemon: Daemon) -> None:
    with grpc.insecure_channel(f"unix:{daemon.socket}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for service in ("", "gitm.v1.Gitmd"):
            resp = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        answers = list(
            refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        )
        names = {s.name for s in answers[0].list_services_response.service}
        assert {"gitm.v1.Gitmd", "grpc.health.v1.Health"} <= names


def test_socket_mode_is_0666(daemon: Daemon) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o666
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o755


def test_metrics_exporter(daemon_factory: Any) -> None:
    port = free_port()
    d = daemon_factory(port=port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    clocks = [x for x in text.splitlines() if x.startswith("gitm_gpu_sm_clock_hertz{")]
    assert any('gpu="1"' in x and "Hostname=" in x and "UUID=" in x for x in clocks), clocks
    assert 'reason="hw_thermal_slowdown"' in text
    assert 'gitm_jobs{state="registered"}' in text and "gitm_build_info{" in text
    assert d.stop() == 0


def test_sigterm_exits_cleanly_and_state_survives_restart(daemon: Daemon) -> None:
    time.sleep(0.6)
    before = ctl_json(daemon.socket, "telemetry", "--since", "1h")["samples"]
    assert before
    assert daemon.stop(signal.SIGTERM) == 0
    assert "gitmd stopped" in daemon.log()
    assert not daemon.socket.exists()
    daemon.start()
    after = ctl_json(daemon.socket, "telemetry", "--since", "1h")["samples"]
    old = {s["ts_unix_ns"] for s in before}
    assert old <= {s["ts_unix_ns"] for s in after}, "samples from the first run must still be there"
    assert daemon.stop(signal.SIGINT) == 0


def test_sd_notify_ready_and_stopping(daemon_factory: Any, short_tmp: Path) -> None:
    addr = short_tmp / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(addr))
    sock.settimeout(20)
    d = daemon_factory(env={"NOTIFY_SOCKET": str(addr)})
    ready = sock.recv(4096).decode()
    assert ready.startswith("READY=1") and "backend sim" in ready
    d.proc.send_signal(signal.SIGTERM)
    assert sock.recv(4096).decode() == "STOPPING=1"
    assert d.proc.wait(15) == 0
    sock.close()


def test_second_instance_is_refused(daemon: Daemon, daemon_factory: Any) -> None:
    second = daemon_factory(start=False)
    second.start(wait=False)
    assert second.proc is not None
    assert second.proc.wait(20) == 1
    assert "another gitmd" in second.log()
    assert ctl(daemon.socket, "status", check=False).returncode == 0, "the first must be untouched"


def test_unwritable_state_dir_is_refused(daemon_factory: Any, short_tmp: Path) -> None:
    blocker = short_tmp / "blocker"
    blocker.write_text("a file where a directory should be")
    d = daemon_factory(start=False, extra_args=["--state-dir", str(blocker / "state")])
    d.start(wait=False)
    assert d.proc is not None and d.proc.wait(20) == 1
    assert "cannot create state directory" in d.log()


def test_malformed_config_names_key_and_line(short_tmp: Path) -> None:
    cfg = short_tmp / "bad.toml"
    cfg.write_text('[telemetry]\nbackend = "sim"\ninterval_s = "fast"\n')
    r = subprocess.run(
        [*command("gitmd"), "--config", str(cfg), "--prefix", str(short_tmp / "v")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "line 3" in r.stderr and "telemetry.interval_s" in r.stderr
    assert not (short_tmp / "v").exists(), "bad config must change nothing"


def test_gitmctl_without_daemon_says_how_to_start(short_tmp: Path) -> None:
    r = ctl(short_tmp / "nothing.sock", "status", check=False)
    assert r.returncode == 3
    assert "gitmd is not running" in r.stderr and "systemctl start gitmd" in r.stderr
    # a stale socket file (nobody listening) reads the same
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(short_tmp / "stale.sock"))
    s.close()
    r = ctl(short_tmp / "stale.sock", "gpus", check=False)
    assert r.returncode == 3 and "not running" in r.stderr


def test_explain_a_capture_offline(daemon: Daemon, short_tmp: Path) -> None:
    """A capture file the CLI reads and sends: gitmd analyses it (ExplainCapture) and keeps nothing."""
    import json as _json

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "capture-cuda-known-work.npz"
    r = ctl(daemon.socket, "explain", "--capture", str(fixture))
    assert "pageable copies: 10" in r.stdout and "gitm_probe_kernel" in r.stdout
    report = _json.loads(ctl(daemon.socket, "explain", "--capture", str(fixture), "--json").stdout)
    (p,) = report["processes"]
    assert abs(sum(c["share"] for c in p["classes"]) - 1.0) < 1e-9 and p["step"]["found"]
    assert p["pageable_copies"] == 10 and p["pageable_saving_ms"] > 0
    bad = short_tmp / "bad.npz"
    bad.write_bytes(b"not a capture")
    r = ctl(daemon.socket, "explain", "--capture", str(bad), check=False)
    assert r.returncode == 2 and "not a gitm capture file" in r.stderr
    r = ctl(daemon.socket, "explain", "--capture", str(short_tmp / "missing.npz"), check=False)
    assert r.returncode == 2 and "missing.npz" in r.stderr
    assert ctl_json(daemon.socket, "jobs", "--all")["jobs"] == []  # nothing stored


def test_sighup_reloads_the_config_and_never_stops_gitmd(daemon_factory: Any, short_tmp: Path) -> None:
    """SIGHUP (`systemctl reload gitmd`) used to end gitmd with a clean exit, which systemd does not
    restart. Now it reads the config again: the log level applies at once, other changes are named
    as needing a restart, a broken config changes nothing, and gitmd keeps serving."""
    addr = short_tmp / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(addr))
    sock.settimeout(20)
    d = daemon_factory(env={"NOTIFY_SOCKET": str(addr)})
    assert sock.recv(4096).decode().startswith("READY=1")
    assert d.proc is not None and d.config is not None
    text = d.config.read_text()
    d.config.write_text(
        text.replace("interval_s = 0.2", "interval_s = 0.5") + '\n[daemon]\nlog_level = "debug"\n'
    )
    d.proc.send_signal(signal.SIGHUP)
    assert sock.recv(4096).decode() == "RELOADING=1" and sock.recv(4096).decode() == "READY=1"
    d.config.write_text("[telemetry]\nbackend = 7\n")
    d.proc.send_signal(signal.SIGHUP)
    assert sock.recv(4096).decode() == "RELOADING=1" and sock.recv(4096).decode() == "READY=1"
    assert d.proc.poll() is None and ctl(d.socket, "status", check=False).returncode == 0
    log = d.log()
    assert "log level now debug" in log and "telemetry.interval_s" in log and "next restart" in log
    assert "configuration not reloaded, nothing changed" in log
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(15) == 0
    sock.close()


def test_one_users_open_streams_never_starve_gitmd(daemon: Daemon) -> None:
    """Hardening issue, item 4: 16 open watches took every gRPC worker and root's `gitmctl status`
    timed out. A caller holds at most 4 streams (the next is refused, RESOURCE_EXHAUSTED, with what
    to do), and unary calls still answer at once; a closed stream frees its place."""
    import time

    from gitmd.api.streams import PER_CALLER

    watch = [*command("gitmctl"), "--socket", str(daemon.socket), "jobs", "--watch"]
    watchers = [
        subprocess.Popen(watch, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(PER_CALLER)
    ]
    try:
        time.sleep(2.0)  # their streams are open
        assert all(w.poll() is None for w in watchers)
        extra = subprocess.run(watch, capture_output=True, text=True, timeout=30)
        assert extra.returncode != 0 and "streams open, the most one caller may hold" in extra.stderr, extra
        t0 = time.monotonic()
        ctl(daemon.socket, "status")
        assert time.monotonic() - t0 < 5.0
        watchers.pop().kill()

        def opened() -> bool:
            p = subprocess.Popen(watch, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(1.0)
            if p.poll() is None:
                watchers.append(p)
                return True
            return False

        deadline = time.monotonic() + 20
        while not opened():  # the server sees the killed watcher go, and frees its place
            assert time.monotonic() < deadline, "a closed stream's place was never freed"
    finally:
        for w in watchers:
            w.kill()
            w.wait()


def test_pause_and_resume_through_the_cli(daemon: Daemon) -> None:
    """`gitmctl pause` (admin): said by `status`, kept in the audit; `resume` undoes it."""
    r = ctl(daemon.socket, "pause", "--reason", "driver upgrade")
    assert "gitmd paused by" in r.stdout and "driver upgrade" in r.stdout
    assert "PAUSED" in ctl(daemon.socket, "status").stdout
    st = ctl_json(daemon.socket, "status")
    assert st["pause"]["paused"] and st["pause"]["reason"] == "driver upgrade"
    r = ctl(daemon.socket, "pause", "--reason", "two\nlines", check=False)
    assert r.returncode == 2 and "one line" in r.stderr
    assert "gitmd resumed by" in ctl(daemon.socket, "resume").stdout
    assert "PAUSED" not in ctl(daemon.socket, "status").stdout
    audit = ctl_json(daemon.socket, "audit", "--limit", "20")["entries"]
    assert [e["target"] for e in audit if e["action"] == "SetPause"][:2] == ["resume", "pause"]


def test_errors_come_as_json_under_json(daemon: Daemon) -> None:
    """Hardening issue, item 11: errors were not JSON under --json."""
    import json

    r = ctl(daemon.socket, "job", "nope", "--json", check=False)
    assert r.returncode == 4 and "no job" in r.stderr
    err = json.loads(r.stdout)
    assert err["exit_code"] == 4 and "no job with id or name 'nope'" in err["error"]


def test_status_config_is_toml_gitmd_reads_back(daemon: Daemon, short_tmp: Path) -> None:
    """Hardening issue, item 11: `status --config` printed lines that were not TOML."""
    import tomllib

    text = ctl(daemon.socket, "status", "--config").stdout
    doc = tomllib.loads(text)
    assert doc["telemetry"]["backend"] == "sim" and doc["daemon"]["socket_mode"]
    saved = short_tmp / "effective.toml"
    saved.write_text(text)
    r = subprocess.run(
        [*command("gitmd"), "--check-config", "--config", str(saved)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and tomllib.loads(r.stdout)["telemetry"] == doc["telemetry"], r.stderr


def test_explain_asks_consent_for_a_numerics_changing_lever(daemon: Daemon) -> None:
    """Convergence issue, item 4: an fp32 cause was ranked on a job whose contract compared no
    numbers, and TF32 (2.7x on it) was never tried, nothing said why. explain now says what the
    lever may recover and the exact command that lets gitmd try it with its outputs checked. The
    capture is fp32 MLP training on the H200; a capture's own window is explained without a job."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "capture-torch-train.npz"
    out = ctl(daemon.socket, "explain", "--capture", str(fixture)).stdout
    assert "consent: tf32_override" in out and "fp32_gemm" in out
    assert "gitmctl run --metric 'loss=([0-9.eE+-]+)' --rtol 1e-3 -- CMD ARGS" in out
    safe = Path(__file__).resolve().parents[1] / "fixtures" / "capture-cuda-known-work.npz"
    assert "consent:" not in ctl(daemon.socket, "explain", "--capture", str(safe)).stdout


def test_a_request_larger_than_gitmd_takes_is_refused_before_it_is_read(daemon: Daemon) -> None:
    """A 20-MiB request (any RPC, any caller) is refused by the transport with RESOURCE_EXHAUSTED:
    gitmd never holds it, and it serves on."""
    import grpc
    import pytest

    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    with open_channel(daemon.socket, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        stub = pb_grpc.GitmdStub(ch)
        big = pb.RegisterJobRequest(name="big", command=["x" * (20 << 20)], cwd="/tmp")
        with pytest.raises(grpc.RpcError) as e:
            stub.RegisterJob(big, timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).version


def test_a_refusal_never_echoes_more_than_a_short_message(daemon: Daemon) -> None:
    """Hostile-user run (2026-12-04): GetWorkload echoed a 10,000-character id into its NOT_FOUND
    message, too large for gRPC's metadata: the caller got RESOURCE_EXHAUSTED instead."""
    import grpc
    import pytest

    from gitmd.api.client_auth import open_channel
    from gitmd.api.pb import pb, pb_grpc

    with open_channel(daemon.socket) as ch:
        stub = pb_grpc.GitmdStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.GetWorkload(pb.GetWorkloadRequest(workload_id="w" * 20_000), timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and len(str(e.value.details())) <= 2000
