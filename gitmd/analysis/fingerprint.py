"""Workload fingerprints: a signature of one step and a similarity between two signatures.

A signature holds the ordered kernel families of one step, with the step's synchronizations and
copies in their place among them (``sync``, ``copy:HtoD:pageable``...), and each family's share of
kernel time. Families fold away what changes with batch size, sequence length or grid (tile sizes,
template numbers, the exact GEMM kernel cuBLAS picks), so one program matches itself across those
changes, seeds and restarts, while programs doing different work do not.

Order is compared through the set of families and of cyclic neighbour pairs in the step: the same
whichever kernel the step detection anchored on, and the same when a longer sequence repeats a
cell more times per step (an RNN over longer sequences).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from gitmd.analysis.steps import StepStats
from gitmd.records import Decoded

MATCH_THRESHOLD = 0.8
_GEMM = re.compile(r"gemm|xmma|cutlass|cublas|sgemm|hgemm|wgmma|matmul|nvjet", re.IGNORECASE)
# The op of an elementwise kernel built from a lambda: the function the lambda is defined in.
_LAMBDA_OP = re.compile(r"(\w+)\((?:at::)?TensorIterator")
_OPERATION = re.compile(r"\b(\w*(?:Functor|Impl)\w*)")
_WRAPPERS = {"AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor", "func_wrapper_t"}


def family(name: str) -> str:
    """The kernel's family: its base name, the functor of an elementwise kernel, or "gemm"."""
    if _GEMM.search(name) and "elementwise" not in name:
        return "gemm"
    text = name[5:] if name.startswith("void ") else name
    text = text.replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", text, maxsplit=1)[0].strip()
    base = head.rsplit("::", 1)[-1] or head
    if "elementwise" in base or base.startswith(("unrolled", "vectorized")):
        # the operation is the innermost functor, not a generic wrapper around it
        ops = [op for op in _OPERATION.findall(text) if op not in _WRAPPERS]
        if ops:
            base = f"elementwise:{ops[-1]}"
        elif m := _LAMBDA_OP.search(text):
            base = f"elementwise:{m.group(1)}"
    return re.sub(r"\d+", "#", base)


@dataclass(frozen=True)
class Signature:
    sequence: tuple[str, ...]  # kernel families of one step, in launch order
    shares: dict[str, float]  # share of kernel time per family over the window's steps

    @property
    def id(self) -> str:
        """A short stable name for display (matching itself is fuzzy, through ``similarity``)."""
        return hashlib.sha1("\n".join(sorted(set(self.sequence))).encode()).hexdigest()[:12]


def signature(records: Decoded, steps: StepStats) -> Signature | None:
    """The signature of one process's window, or None when no step was found in it."""
    if not steps.found:
        return None
    records = records.timed()
    k = np.sort(records.kernels, order="start_ns")
    fam = [family(records.names.get(int(i), f"kernel#{int(i)}")) for i in k["name_id"].tolist()]
    anchors = np.flatnonzero(k["name_id"] == steps.anchor_name_id)
    step_seq: tuple[str, ...] = ()
    for a, b in itertools.pairwise(anchors.tolist()):
        if b - a == steps.period_kernels:  # a typical, complete step
            step_seq = _with_host_events(records, k, fam, a, b)
            break
    if not step_seq:
        return None
    durations = (k["end_ns"].astype(np.int64) - k["start_ns"].astype(np.int64)).astype(np.float64)
    lo, hi = int(anchors[0]), int(anchors[-1])
    total = float(durations[lo:hi].sum()) or 1.0
    shares: dict[str, float] = {}
    for f, d in zip(fam[lo:hi], durations[lo:hi].tolist(), strict=True):
        shares[f] = shares.get(f, 0.0) + d / total
    return Signature(step_seq, shares)


_COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
_MEM_KINDS = {1: "pageable", 2: "pinned", 3: "device"}


def _with_host_events(r: Decoded, k: np.ndarray, fam: list[str], a: int, b: int) -> tuple[str, ...]:
    """Kernel families a..b-1 with the syncs and copies that started in that stretch, in time order."""
    lo = int(k["start_ns"][a])
    hi = int(k["start_ns"][b]) if b < len(k) else int(k["end_ns"][b - 1])
    events: list[tuple[int, str]] = [
        (int(t), f) for t, f in zip(k["start_ns"][a:b].tolist(), fam[a:b], strict=True)
    ]
    sy = r.syncs[(r.syncs["start_ns"] >= lo) & (r.syncs["start_ns"] < hi)]
    events += [(int(t), "sync") for t in sy["start_ns"].tolist()]
    m = r.memcpys[(r.memcpys["start_ns"] >= lo) & (r.memcpys["start_ns"] < hi)]
    for t, ck, src, dst in zip(
        m["start_ns"].tolist(),
        m["copy_kind"].tolist(),
        m["src_kind"].tolist(),
        m["dst_kind"].tolist(),
        strict=True,
    ):
        host = src if ck == 1 else dst
        events.append((int(t), f"copy:{_COPY_KINDS.get(ck, ck)}:{_MEM_KINDS.get(host, host)}"))
    events.sort(key=lambda e: e[0])
    return tuple(e[1] for e in events)


def _shape(seq: tuple[str, ...]) -> set[tuple[str, ...]]:
    """The step's families and its cyclic neighbour pairs."""
    out: set[tuple[str, ...]] = {(f,) for f in seq}
    out |= {(seq[i], seq[(i + 1) % len(seq)]) for i in range(len(seq))}
    return out


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    dot = sum(v * b.get(k, 0.0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def similarity(a: Signature, b: Signature) -> float:
    """0..1: half the time-share cosine, half the overlap (Jaccard) of the steps' shapes."""
    sa, sb = _shape(a.sequence), _shape(b.sequence)
    order = len(sa & sb) / len(sa | sb) if sa or sb else 0.0
    return 0.5 * _cosine(a.shares, b.shares) + 0.5 * order


# similarity >= MATCH_THRESHOLD needs the time-share cosine at least this (the shape overlap is at
# most 1): 0.5 * cos + 0.5 >= MATCH_THRESHOLD
MIN_COSINE = 2 * MATCH_THRESHOLD - 1


def heavy_families(s: Signature) -> frozenset[str]:
    """The fewest of ``s``'s families, largest share first, without which what is left of its share
    vector is shorter than MIN_COSINE of its length. A signature that shares none of them with
    ``s`` has a cosine with it below MIN_COSINE (Cauchy-Schwarz: the dot product then comes from the
    rest alone, at most its length times the other's), so it cannot match ``s``: the library looks
    for matches only among workloads whose families meet these (gitmd/store/library.py)."""
    total = sum(v * v for v in s.shares.values())
    if total <= 0:
        return frozenset()
    left, out = total, []
    for f, v in sorted(s.shares.items(), key=lambda kv: -kv[1]):
        if left < MIN_COSINE * MIN_COSINE * total * (1 - 1e-9):  # margin: more families, never fewer
            break
        out.append(f)
        left -= v * v
    return frozenset(out)


def same_workload(a: Signature, b: Signature) -> bool:
    return similarity(a, b) >= MATCH_THRESHOLD
