"""A job's user shrinks their ring file under gitmd (hardening issue, reproduced on the landed code:
`truncate -s 0` on a ring gitmd had mapped killed gitmd with SIGBUS, five repeats exhausted the
unit's restart limit). gitmd never maps a ring: a shrunk one reads short, is dropped, and gitmd and
the job's other rings go on."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gitmd.capture import abi
from gitmd.capture.ring import Ring, RingShrunk
from gitmd.capture.windows import CaptureManager

_MAPPINGS: list[mmap.mmap] = []


def _live_ring(job_dir: Path, write_ring: Callable[..., Path], name: str) -> Path:
    """A real ring (from the shim's own C writer) naming this living test process."""
    data = bytearray(
        write_ring(10 + int(name.split("-")[1]), 64).read_bytes()
    )  # a directory of its own per call
    data[40:44] = os.getpid().to_bytes(4, "little")
    stat = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    data[48:56] = int(stat[19]).to_bytes(8, "little")
    path = job_dir / name
    path.write_bytes(bytes(data))
    with open(path, "r+b") as f:  # this process maps it, as the shim would: gitmd trusts its pid then
        _MAPPINGS.append(mmap.mmap(f.fileno(), 0))
    return path


@pytest.mark.parametrize("size", [0, 4096, 2 * 4096 + 64], ids=["empty", "header-only", "cut-records"])
def test_a_shrunk_ring_reads_short_and_never_faults(write_ring: Callable[..., Path], size: int) -> None:
    path = write_ring(100, 256)
    ring = Ring(path)
    assert ring.status().pending > 0
    os.truncate(path, size)
    with pytest.raises(RingShrunk):
        ring.status()
    with pytest.raises(RingShrunk):
        ring.drain()
    with pytest.raises(RingShrunk):
        ring.open_window(1, 1)
    assert os.path.getsize(path) == size  # a control write never grows the file back
    ring.close()


def test_gitmd_drops_a_shrunk_ring_and_goes_on_with_the_others(
    tmp_path: Path, write_ring: Callable[..., Path]
) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    bad = _live_ring(job_dir, write_ring, "ring-1-1.gitm")
    _live_ring(job_dir, write_ring, "ring-2-2.gitm")
    cm = CaptureManager(abi.load(), ("kernel",), 250)
    cm.track("j", job_dir)
    assert [alive for _, alive in cm.processes("j")] == [True, True]
    os.truncate(bad, 0)  # the job's user, while gitmd tracks it
    procs = cm.processes("j")
    assert sorted(alive for _, alive in procs) == [False, True]
    (gone,) = [st for st, alive in procs if not alive]
    assert gone.status == "off" and "shrank" in gone.reason
    w = cm.capture("j", 0.05, ack_timeout_s=0.05)  # no shim answers: only the good ring is in it
    assert len(w.processes) == 1 and w.processes[0].status.status != "off"
    assert cm.lifetime_ns("j") is not None and cm.end_observation("j", timeout_s=0.05) is not None
    cm.untrack("j")
