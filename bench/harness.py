"""Starting gitmd for a benchmark: the real daemon on its own state folder, ready when it answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gitmd.api.client_auth import open_channel  # noqa: E402
from gitmd.api.pb import pb, pb_grpc  # noqa: E402

# As the systemd unit runs it (packaging/systemd/gitmd.service, Environment=).
UNIT_ENV = {"MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def gitmd_cmd() -> list[str]:
    script = Path(sys.executable).parent / "gitmd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gitmd"]


class Gitmd:
    """gitmd with state under ``prefix`` and this config; ``start`` waits until it answers."""

    def __init__(self, prefix: Path, config_text: str) -> None:
        self.prefix = prefix
        prefix.parent.mkdir(parents=True, exist_ok=True)
        self.config = prefix.parent / f"{prefix.name}.toml"
        self.config.write_text(config_text)
        self.log = prefix.parent / f"{prefix.name}.log"
        self.socket = prefix / "run" / "gitmd.sock"
        self.db = prefix / "lib" / "gitmd.db"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"unix:{self.socket}"

    def start(self, timeout_s: float = 30) -> pb_grpc.GitmdStub:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*gitmd_cmd(), "--config", str(self.config), "--prefix", str(self.prefix)],
                stdout=log,
                stderr=log,
                env={**os.environ, **UNIT_ENV},
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.socket.exists():
                stub = self.stub()
                try:
                    stub.GetStatus(pb.GetStatusRequest(), timeout=2)
                    return stub
                except grpc.RpcError:
                    pass
            time.sleep(0.05)
        raise SystemExit(f"gitmd did not start:\n{self.log.read_text()[-3000:]}")

    def stub(self) -> pb_grpc.GitmdStub:
        return pb_grpc.GitmdStub(
            open_channel(self.socket, options=[("grpc.max_send_message_length", 80 << 20)])
        )

    def stop(self, sig: int = 15) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        if self.proc is not None:
            self.proc.wait(60)
