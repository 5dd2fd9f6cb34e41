"""Payload samples: the bytes of small device-to-host copies the shim read during a window (a loss
that ``.item()`` copies each step, a checksum), for the equivalence checks of experiments."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded

SOURCES = {1: "sync copy", 2: "async copy", 3: "generic copy"}


@dataclass(frozen=True)
class PayloadSample:
    t_ns: int  # CUPTI time the shim read it (after the copy completed)
    correlation_id: int  # of the copy's API call
    source: str
    data: bytes


def samples(r: Decoded) -> list[PayloadSample]:
    p = np.sort(r.payloads, order="start_ns")
    n = np.minimum(p["flags"].astype(np.int64), p["data"].shape[1] if p["data"].ndim == 2 else 0)
    return [
        PayloadSample(int(t), int(c), SOURCES.get(int(s), f"source {int(s)}"), bytes(d[:k]))
        for t, c, s, d, k in zip(p["start_ns"], p["correlation_id"], p["device"], p["data"], n, strict=True)
    ]


def scalars(r: Decoded, dtype: str = "<f4") -> np.ndarray:
    """The samples that are one scalar of ``dtype`` (by size), in time order, as that type."""
    d = np.dtype(dtype)
    p = np.sort(r.payloads, order="start_ns")
    one = p[p["flags"] == d.itemsize]
    return np.ascontiguousarray(one["data"][:, : d.itemsize]).view(d).reshape(-1)
