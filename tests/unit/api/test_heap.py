"""A large request's memory is given back once it is answered (gitmd/api/heap.py)."""

from __future__ import annotations

import time

from gitmd.api import heap
from gitmd.api.pb import pb


def test_a_requests_size_is_counted_without_serialising_it() -> None:
    doc = pb.LibraryDocument(json=b"x" * 5000)
    assert heap.size(doc) == 5000
    reg = pb.RegisterJobRequest(name="n" * 10, command=["a" * 100, "b" * 200], cwd="/w", gpus=[0, 1])
    assert 310 <= heap.size(reg) <= 310 + 8 * 4  # strings whole, the numbers a few bytes each
    assert heap.size(object()) == 0  # not a message: nothing to measure


def test_only_a_large_request_trims_the_heap_soon_after() -> None:
    before = heap.trims
    assert heap.release(pb.LibraryDocument(json=b"{}")) is False
    assert heap.release(pb.LibraryDocument(json=b" " * heap.LARGE_REQUEST_BYTES)) is True  # glibc here
    deadline = time.monotonic() + 10
    while heap.trims == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert heap.trims > before
