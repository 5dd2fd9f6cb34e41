"""A large request's memory is given back once it is answered (gitmd/api/heap.py)."""

from __future__ import annotations

from gitmd.api import heap
from gitmd.api.pb import pb


def test_only_a_large_request_trims_the_heap() -> None:
    small = pb.LibraryDocument(json=b"{}")
    large = pb.LibraryDocument(json=b" " * heap.LARGE_REQUEST_BYTES)
    assert heap.release(small) is False
    assert heap.release(large) is True  # glibc: malloc_trim is there
    assert heap.release(object()) is False  # not a message: nothing to measure, nothing done
