"""A process's rank in a distributed job, from its launcher's variables (gitmd/capture/ranks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gitmd.capture.ranks import MAX_ENVIRON, Rank, parse, rank_of

READY = "import sys; print('ready', flush=True); sys.stdin.read()"


def env(**kv: str) -> bytes:
    return b"\0".join(f"{k}={v}".encode() for k, v in kv.items()) + b"\0"


def test_torchrun_and_slurm_variables() -> None:
    assert parse(env(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", PATH="/bin")) == Rank(1, 1, 2)
    assert parse(env(SLURM_PROCID="3", SLURM_LOCALID="1", SLURM_NTASKS="4")) == Rank(3, 1, 4)
    # torchrun's names win over Slurm's (torchrun under srun: its workers carry both)
    assert parse(env(SLURM_PROCID="0", SLURM_NTASKS="1", RANK="5", WORLD_SIZE="8")) == Rank(5, None, 8)
    assert str(Rank(1, 0, 2)) == "1/2 (local 0)" and str(Rank(5, None, 8)) == "5/8"


def test_what_is_not_a_rank() -> None:
    assert parse(env(PATH="/bin")) is None  # launched alone
    assert parse(env(RANK="2", WORLD_SIZE="2")) is None  # a rank must be below its world size
    assert parse(env(RANK="-1", WORLD_SIZE="2")) is None
    assert parse(env(RANK="1", WORLD_SIZE="2" * 40)) is None  # a number of 40 digits
    assert parse(env(RANK="0x1", WORLD_SIZE="2")) is None
    assert parse(env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="9")) == Rank(0, None, 2)  # local beyond the world
    assert parse(b"RANK=1\0RANK=0\0WORLD_SIZE=2\0") == Rank(1, None, 2)  # the first of a name, as getenv
    assert parse(b"\xff\xfe garbage \0=\0RANK\0") is None


def test_a_real_processes_environment_is_read() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", READY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"},
    )
    try:
        assert (
            child.stdout is not None and child.stdout.readline() == b"ready\n"
        )  # exec'ed: its own environment
        assert rank_of(child.pid) == Rank(1, 1, 2)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    assert rank_of(child.pid) is None  # gone: no rank, no error
    assert rank_of(os.getpid()) is None or "RANK" in os.environ


def test_a_huge_environment_is_read_bounded() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", READY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        # variables of 100 kB each (one may not exceed 128 kB), then the rank's, past the bound
        env={
            **{f"PAD{i}": "x" * 100_000 for i in range(MAX_ENVIRON // 100_000 + 1)},
            "RANK": "0",
            "WORLD_SIZE": "2",
        },
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        assert rank_of(child.pid) is None  # its variables after the bound are not read
        whole = Path(f"/proc/{child.pid}/environ").read_bytes()
        assert len(whole) > MAX_ENVIRON and parse(whole) == Rank(0, None, 2)  # they are there
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
