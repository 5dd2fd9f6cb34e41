"""Fixtures that start the real gitmd on a temporary socket and state, and run the real gitmctl."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def command(tool: str) -> list[str]:
    """The installed console script when there is one (the venv), else ``python -m tool`` (GPU host)."""
    script = BIN / tool
    return [str(script)] if script.exists() else [sys.executable, "-m", tool]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    prefix: Path
    config: Path
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None

    @property
    def socket(self) -> Path:
        return self.prefix / "run" / "gitmd.sock"

    def start(self, wait: bool = True) -> Daemon:
        self.log_path = self.prefix.parent / f"gitmd-{time.monotonic_ns()}.log"
        log = open(self.log_path, "w")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                *command("gitmd"),
                "--prefix",
                str(self.prefix),
                "--config",
                str(self.config),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **self.env},
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"gitmd exited with {self.proc.returncode}:\n{self.log()}")
            if ctl(self.socket, "status", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise AssertionError(f"gitmd did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"gitmd did not stop within {timeout_s:g} s:\n{self.log()[-4000:]}"
            ) from None


def ctl(
    socket_path: Path, *args: str, check: bool = True, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [*command("gitmctl"), "--socket", str(socket_path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"gitmctl {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def ctl_json(socket_path: Path, *args: str) -> Any:
    return json.loads(ctl(socket_path, *args, "--json").stdout)


SIM_CONFIG = """
[telemetry]
backend = "sim"
interval_s = 0.2
[metrics]
port = {port}
[sim]
gpus = 2
processes = [{{ gpu = 0, pid = 4242, name = "train.py", used_memory_bytes = 1073741824 }}]
throttle_episodes = [{{ gpu = 1, start_s = 0, duration_s = 3600, reason = "hw_thermal_slowdown" }}]
[capture]
# windows only on demand: the duty tick runs every second, and tests count the windows they open
# (a test of the duty cycle writes its own config)
window_every_s = 0
"""


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="gitmd-") as d:
        yield Path(d)


@pytest.fixture
def daemon_factory(short_tmp: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def make(
        port: int | None = None, config_text: str | None = None, start: bool = True, **kw: Any
    ) -> Daemon:
        cfg = short_tmp / f"gitmd-{len(started)}.toml"
        cfg.write_text(config_text if config_text is not None else SIM_CONFIG.format(port=port or 0))
        d = Daemon(prefix=short_tmp / "var", config=cfg, **kw)
        started.append(d)
        return d.start() if start else d

    yield make
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


@pytest.fixture
def daemon(daemon_factory: Any) -> Daemon:
    return daemon_factory()  # type: ignore[no-any-return]
