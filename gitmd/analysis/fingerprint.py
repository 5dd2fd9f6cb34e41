"""Workload fingerprints: a signature of one step and a similarity between two signatures.

A signature holds the ordered kernel families of one step and each family's share of kernel time.
Families fold away what changes with batch size, sequence length or grid (tile sizes, template
numbers, the exact GEMM kernel cuBLAS picks), so one program matches itself across those changes,
seeds and restarts, while programs doing different work do not.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from gitmd.analysis.steps import StepStats
from gitmd.capture.decode import Decoded

MATCH_THRESHOLD = 0.8
_GEMM = re.compile(r"gemm|xmma|cutlass|cublas|sgemm|hgemm|wgmma|matmul", re.IGNORECASE)
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
    k = np.sort(records.kernels, order="start_ns")
    fam = [family(records.names.get(int(i), f"kernel#{int(i)}")) for i in k["name_id"].tolist()]
    anchors = np.flatnonzero(k["name_id"] == steps.anchor_name_id)
    step_seq: tuple[str, ...] = ()
    for a, b in itertools.pairwise(anchors.tolist()):
        if b - a == steps.period_kernels:  # a typical, complete step
            step_seq = tuple(fam[a:b])
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


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    dot = sum(v * b.get(k, 0.0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def similarity(a: Signature, b: Signature) -> float:
    """0..1: half the time-share cosine, half the order of the step's families."""
    order = difflib.SequenceMatcher(None, a.sequence, b.sequence, autojunk=False).ratio()
    return 0.5 * _cosine(a.shares, b.shares) + 0.5 * order


def same_workload(a: Signature, b: Signature) -> bool:
    return similarity(a, b) >= MATCH_THRESHOLD
