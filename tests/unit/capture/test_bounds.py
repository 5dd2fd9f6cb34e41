"""What a hostile ring can make gitmd hold is bounded (hardening issue, item 3: a 256 MiB ring
drained whole took gitmd from 1.2 to 5.1 GB; kernel-name fragments that never completed piled up)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from gitmd.capture import abi
from gitmd.capture.decode import MAX_NAME_CHUNKS, MAX_PENDING_NAMES, NameTable, drain_decode
from gitmd.capture.ring import Ring


def test_a_drain_decodes_at_most_its_cap_and_the_rest_is_given_back_chunk_by_chunk(
    write_ring: Callable[..., Path],
) -> None:
    ring = Ring(write_ring(5000, 8192))  # 5000 records (and its names) by the shim's own C writer
    before = ring.pending()
    assert before >= 5000
    first = drain_decode(ring, max_records=1200)
    assert 0 < first.count <= 1200  # what it decoded came from the 1200 records read
    assert ring.pending() == before - 1200
    assert ring.discard() == before - 1200 and ring.pending() == 0  # given back in chunks


def _names(rows: list[tuple[int, int, bool, bytes]]) -> np.ndarray:
    """NAME records: (name id, chunk index, last chunk, text)."""
    a = abi.load()
    recs = np.zeros(len(rows), dtype=a.record)
    for i, (name_id, chunk, last, text) in enumerate(rows):
        recs["correlation_id"][i] = name_id
        recs["device"][i] = chunk
        recs["flags"][i] = 1 if last else 0
        recs.view(np.uint8).reshape(-1, 64)[i, 16 : 16 + len(text)] = np.frombuffer(text, np.uint8)
    return recs


def test_name_fragments_are_bounded() -> None:
    t = NameTable()
    t.feed(_names([(1, 0, False, b"kernel_a"), (1, 1, True, b"_b")]))
    assert t.names[1] == "kernel_a_b"  # a name whole, as before
    t.feed(_names([(2, MAX_NAME_CHUNKS, True, b"x")]))  # a chunk index no name has
    assert 2 not in t.names and t.dropped == 1
    t.feed(_names([(100 + i, 0, False, b"never ends") for i in range(MAX_PENDING_NAMES + 50)]))
    assert len(t._partial) == MAX_PENDING_NAMES and t.dropped == 1 + 50
