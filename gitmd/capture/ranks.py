"""Which rank of a distributed job a process is, from the environment its launcher gave it.

torchrun (and torch.distributed.launch, Lightning, Accelerate) start each worker with RANK,
LOCAL_RANK and WORLD_SIZE; Slurm's srun, one task per GPU, with SLURM_PROCID, SLURM_LOCALID and
SLURM_NTASKS. Every worker inherits the job's GITM_JOB_DIR, so each writes its own ring into the
job's folder and the ranks are already one gitmd job (one window opens on all of them at once).
This names each process's rank for `gitmctl job` and the analysis of a step across ranks.

A process's environment at exec is in /proc/<pid>/environ (root reads it). It is the job user's
text: read bounded, and only well-formed numbers within range are believed (a rank below its
world size); anything else is no rank. It shows how the process was launched, nothing is decided
on it yet.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_ENVIRON = 1 << 20  # bytes of a process's environment read at most
MAX_WORLD = 1 << 20
# (rank, local rank, world size): the launchers' names, tried in this order
LAUNCHERS = (("RANK", "LOCAL_RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"))


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int | None  # None: the launcher gave none
    world_size: int

    def __str__(self) -> str:
        local = f" (local {self.local_rank})" if self.local_rank is not None else ""
        return f"{self.rank}/{self.world_size}{local}"


def _number(text: bytes | None) -> int | None:
    if text is None or not 0 < len(text) <= 7 or not text.isdigit():
        return None
    return int(text)


def parse(environ: bytes) -> Rank | None:
    """The rank a launcher's variables name in a NUL-separated environment, or None."""
    env: dict[bytes, bytes] = {}
    for item in environ.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key not in env:
            env[key] = value
    for rank_var, local_var, world_var in LAUNCHERS:
        rank, world = _number(env.get(rank_var.encode())), _number(env.get(world_var.encode()))
        if rank is None or world is None:
            continue
        if not 0 <= rank < world <= MAX_WORLD:
            return None
        local = _number(env.get(local_var.encode()))
        return Rank(rank, local if local is not None and local < world else None, world)
    return None


def rank_of(pid: int) -> Rank | None:
    """The rank of process ``pid`` by its launcher's variables; None when it has none, or its
    environment cannot be read (it exited, or this process may not read it)."""
    try:
        fd = os.open(f"/proc/{int(pid)}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = b""
        while len(data) < MAX_ENVIRON:
            chunk = os.read(fd, min(65536, MAX_ENVIRON - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse(data)
