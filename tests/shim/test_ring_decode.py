"""Rings written by the C ring code (ring_writer), read and decoded by the daemon's Python side."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitmd.capture.abi import load
from gitmd.capture.decode import NameTable, decode
from gitmd.capture.ring import Ring, RingError, RingNotReady

WriteRing = Callable[..., Path]


def test_decode_every_type_with_values(write_ring: WriteRing) -> None:
    ring = Ring(write_ring(6000, 8192))
    st = ring.status()
    assert st.pid > 0 and st.status == "idle" and st.reason == "ring_writer" and st.ring_drops == 0
    d = decode(ring.drain())
    assert d.count == 6000
    assert (len(d.kernels), len(d.memcpys), len(d.memsets), len(d.syncs), len(d.memory)) == (
        2000,
        1000,
        1000,
        1000,
        1000,
    )
    k = d.kernels
    i = k["correlation_id"].astype(np.int64)
    assert np.array_equal(k["start_ns"], 1_000_000 + i * 1000)
    assert np.array_equal(k["name_id"], i % 3 + 1)
    assert np.array_equal(k["grid_x"], i % 1000 + 1) and np.all(k["block_x"] == 256)
    m = d.memcpys
    pageable = m["correlation_id"] % 4 == 0
    assert np.all(m["src_kind"][pageable] == 1) and np.all(m["src_kind"][~pageable] == 2)
    assert d.names[1] == "vector_add(float const*, float const*, float*, int)"  # demangled
    assert d.names[2].startswith("void at::native::elementwise_kernel<128, 4,") and len(d.names[2]) > 200
    assert d.names[3] == "ampere_sgemm_128x64_tn"
    assert len(d.clocks) == 1 and int(d.clocks["real_ns"][0]) == 1796000000000000000
    assert ring.drain().size == 0  # drained once only


def test_many_threads_and_partial_drains(write_ring: WriteRing) -> None:
    ring = Ring(write_ring(50_000, 65536, 4))
    names = NameTable()
    total = 0
    while True:
        raw = ring.drain(max_records=7000)
        if raw.size == 0:
            break
        total += decode(raw, names=names).count
    assert total == 50_000 and set(names.names) == {1, 2, 3}


def test_overflow_is_counted(write_ring: WriteRing) -> None:
    produced = int(Ring(write_ring(1000, 4096)).hdr["head"])  # 1000 + name chunks + clock record
    assert produced > 1000
    ring = Ring(write_ring(1000, 256))
    assert ring.status().ring_drops == produced - 256
    assert len(ring.drain()) == 256


def test_unpublished_slot_stops_the_drain(write_ring: WriteRing) -> None:
    path = write_ring(100, 256)
    a = load()
    with open(path, "r+b") as f:  # un-publish slot 50: as if a producer were still writing it
        f.seek(2 * a.page_size + 50 * 64)
        f.write(struct.pack("<Q", 0))
    ring = Ring(path)
    head = int(ring.hdr["head"])
    assert len(ring.drain()) == 50
    assert len(ring.drain()) == 0
    with open(path, "r+b") as f:
        f.seek(2 * a.page_size + 50 * 64)
        f.write(struct.pack("<Q", 51))
    assert len(ring.drain()) == head - 50


def _corrupt(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize(
    ("offset", "data", "message"),
    [
        (0, struct.pack("<Q", 0xDEADBEEF), "wrong magic"),
        (8, struct.pack("<I", 99), "ABI version 99"),
        (12, struct.pack("<I", 32), "record size 32"),
        (16, struct.pack("<Q", 1000), "not a sane power of two"),
        (16, struct.pack("<Q", 1 << 40), "not a sane power of two"),
        (16, struct.pack("<Q", 1 << 20), "header says"),
        (24, struct.pack("<Q", 12345), "records offset"),
        (32, struct.pack("<Q", 1 << 60), "header says"),
        (4096, struct.pack("<Q", 7), "control page"),
    ],
)
def test_corrupt_headers_are_refused(write_ring: WriteRing, offset: int, data: bytes, message: str) -> None:
    path = write_ring(10, 64)
    _corrupt(path, offset, data)
    with pytest.raises(RingError, match=message):
        Ring(path)


def test_not_ready_is_distinct(write_ring: WriteRing) -> None:
    path = write_ring(10, 64)
    _corrupt(path, 0, b"\0" * 8)
    with pytest.raises(RingNotReady):
        Ring(path)


def test_truncated_random_symlink_and_fifo(tmp_path: Path, write_ring: WriteRing) -> None:
    good = write_ring(10, 64)
    truncated = tmp_path / "t.gitm"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(RingError, match="truncated"):
        Ring(truncated)
    cut = tmp_path / "cut.gitm"
    cut.write_bytes(good.read_bytes()[:-64])
    with pytest.raises(RingError, match="header says"):
        Ring(cut)
    rng = np.random.default_rng(0)
    for i in range(200):
        junk = tmp_path / f"junk{i}.gitm"
        junk.write_bytes(rng.integers(0, 256, size=int(rng.integers(0, 20000)), dtype=np.uint8).tobytes())
        with pytest.raises(RingError):
            Ring(junk)
    link = tmp_path / "link.gitm"
    link.symlink_to(good)
    with pytest.raises(RingError, match="cannot open"):
        Ring(link)
    fifo = tmp_path / "fifo.gitm"
    os.mkfifo(fifo)
    with pytest.raises(RingError, match="not a regular file"):
        Ring(fifo)
    (tmp_path / "dir.gitm").mkdir()
    with pytest.raises(RingError):
        Ring(tmp_path / "dir.gitm")


def test_random_record_bytes_never_break_decode(write_ring: WriteRing) -> None:
    """Hostile contents inside a valid header: decoding must return, whatever the bytes say."""
    path = write_ring(500, 1024)
    a = load()
    rng = np.random.default_rng(1)
    with open(path, "r+b") as f:
        f.seek(2 * a.page_size)
        body = rng.integers(0, 256, size=1024 * 64, dtype=np.uint8)
        recs = body.view(a.record)
        recs["seq"] = np.arange(1, 1025, dtype=np.uint64)  # "published"
        f.write(body.tobytes())
        f.seek(64)
        f.write(struct.pack("<Q", 1024))  # head
        f.seek(128)
        f.write(struct.pack("<Q", 0))  # tail
    ring = Ring(path)
    names = NameTable()
    d = decode(ring.drain(), names=names)
    assert d.count <= 1024
    assert all(isinstance(v, str) for v in names.names.values())


def test_control_page_round_trip(write_ring: WriteRing) -> None:
    ring = Ring(write_ring(10, 64))
    seq = ring.open_window(7, 0b11111, flush_interval_ms=100)
    assert int(ring.ctl["window_open"]) == 1 and int(ring.ctl["window_id"]) == 7
    assert not ring.acked(seq)  # nobody (no shim) answers a ring_writer ring
    seq2 = ring.close_window()
    assert seq2 == seq + 1 and int(ring.ctl["window_open"]) == 0
    with pytest.raises(TimeoutError):
        ring.knob(1, timeout_s=0.05)


def test_drain_across_the_wrap_keeps_order(write_ring: WriteRing) -> None:
    """Republish records past the end of a small ring (as a producer would) and read them back."""
    from gitmd.capture.decode import drain_decode

    ring = Ring(write_ring(40, 64))
    first = ring.read_rows(0, int(ring.hdr["head"]))
    drain_decode(ring)
    start = int(ring.hdr["tail"])
    assert start > 40
    kernels = first[first.view(np.uint8)[:, 8] == 1]
    for k, pos in enumerate(range(start, start + 50)):  # 50 more: wraps past slot 63
        row = kernels[k % len(kernels)].copy()
        row[0] = pos + 1  # seq: published
        row[2] = 10_000 + k  # start_ns, to check order
        ring.write_rows(pos & ring.mask, row[None, :])
    ring.hdr["head"] = start + 50
    d = drain_decode(ring)
    assert len(d.kernels) == 50
    assert d.kernels["start_ns"].tolist() == list(range(10_000, 10_050))
    assert ring.pending() == 0


def test_discard_gives_slots_back_unread(write_ring: WriteRing) -> None:
    ring = Ring(write_ring(100, 256))
    head = int(ring.hdr["head"])
    assert ring.discard() == head and ring.pending() == 0 and len(ring.drain()) == 0
    assert ring.discard() == 0


# -- hostile contents behind a valid header: the decoder's bounds checks -----------------------
RECORDS_OFFSET = 2 * 4096
_PRISTINE: list[bytes] = []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    head=st.integers(0, 2**64 - 1),
    tail=st.integers(0, 2**64 - 1),
    junk=st.binary(min_size=0, max_size=64 * 64),
    where=st.integers(0, 63),
)
def test_random_counters_and_records_never_escape_as_anything_but_ring_errors(
    write_ring: WriteRing, head: int, tail: int, junk: bytes, where: int
) -> None:
    if not _PRISTINE:
        _PRISTINE.append(write_ring(40, 64).read_bytes())
    path = Path(tempfile.mkdtemp(prefix="gitm-fuzz-")) / "ring-1-1.gitm"
    path.write_bytes(_PRISTINE[0])
    abi = load()
    h_off = abi.header.fields["head"][1]
    t_off = abi.header.fields["tail"][1]
    _corrupt(path, h_off, struct.pack("<Q", head))
    _corrupt(path, t_off, struct.pack("<Q", tail))
    _corrupt(path, RECORDS_OFFSET + where * 64, junk[: (64 - where) * 64])
    try:
        ring = Ring(path, owner_uid=os.getuid())
        names = NameTable()
        for _ in range(3):
            decode(ring.drain(), names=names)
        ring.status()
    except RingError:
        pass
    finally:
        shutil.rmtree(path.parent)


def test_rings_of_another_owner_or_with_links_are_refused(write_ring: WriteRing, tmp_path: Path) -> None:
    path = write_ring(10, 64)
    with pytest.raises(RingError, match="not the job's uid"):
        Ring(path, owner_uid=os.getuid() + 1)
    link = tmp_path / "hard.gitm"
    os.link(path, link)
    with pytest.raises(RingError, match="hard links"):
        Ring(path, owner_uid=os.getuid())
