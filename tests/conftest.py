"""Shared fixtures: the shim's C ring tools (built once per session through shim/Makefile)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "shim" / "build"


@pytest.fixture(scope="session")
def shim_tools() -> Path:
    r = subprocess.run(
        ["make", "-C", str(ROOT / "shim"), "tests"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return BUILD


@pytest.fixture
def write_ring(shim_tools: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(records: int, capacity: int, threads: int = 1) -> Path:
        d = tmp_path / f"ring-{records}-{capacity}-{threads}"
        d.mkdir()
        out = subprocess.run(
            [str(shim_tools / "ring_writer"), str(d), str(records), str(capacity), str(threads)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return Path(out.stdout.strip())

    return write
