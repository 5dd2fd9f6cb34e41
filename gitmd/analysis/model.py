"""Expected kernel durations from a workload's own history, and each kernel's residual against them.

A kernel's key is its name with its grid and block size (the same kernel on another grid is other
work). For each key the model keeps the median duration and the scaled median absolute deviation
over every run of it in the history windows: robust to the outliers (a preempted kernel, a clock
dip) it is meant to find. A kernel is "slow" when it ran longer than its median by more than
SLOW_MADS deviations (and SLOW_FLOOR of its median, so near-constant kernels do not flag noise).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded

MIN_RUNS = 5  # a key needs this many runs in the history to be modelled
SLOW_MADS = 3.0
SLOW_FLOOR = 0.05
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data

Key = tuple[str, int, int]  # name, grid size, block size


def _keys(r: Decoded) -> tuple[list[Key], np.ndarray]:
    """Distinct keys of the window's kernels and each kernel's index into them."""
    k = r.kernels
    grid = k["grid_x"].astype(np.int64) * k["grid_y"].astype(np.int64) * k["grid_z"].astype(np.int64)
    block = k["block_x"].astype(np.int64) * k["block_y"].astype(np.int64) * k["block_z"].astype(np.int64)
    # one int64 code per (name, grid, block) from each column's dense codes: 1-D uniques are fast
    cols = [np.unique(c, return_inverse=True) for c in (k["name_id"].astype(np.int64), grid, block)]
    code = cols[0][1].astype(np.int64)
    for values, inv in cols[1:]:
        code = code * len(values) + inv
    uniq, inverse = np.unique(code, return_inverse=True)
    nb, ng = len(cols[2][0]), len(cols[1][0])
    keys = [
        (
            r.names.get(int(cols[0][0][c // (nb * ng)]), f"kernel#{int(cols[0][0][c // (nb * ng)])}"),
            int(cols[1][0][(c // nb) % ng]),
            int(cols[2][0][c % nb]),
        )
        for c in uniq.tolist()
    ]
    return keys, inverse.reshape(-1)


def durations(r: Decoded) -> np.ndarray:
    k = r.kernels
    return (k["end_ns"].astype(np.int64) - k["start_ns"].astype(np.int64)).astype(np.float64)


@dataclass(frozen=True)
class KernelModel:
    stats: dict[Key, tuple[float, float, int]]  # median ns, scaled MAD ns, runs
    windows: int

    @staticmethod
    def fit(history: list[Decoded]) -> KernelModel:
        h = History()
        for r in history:
            h.add(r, 0.0)
        return h.model()

    def residuals(self, r: Decoded) -> tuple[np.ndarray, np.ndarray]:
        """(residual ns, slow) per kernel of ``r``; residual NaN where the key is not modelled."""
        n = len(r.kernels)
        if not n:
            return np.zeros(0), np.zeros(0, dtype=bool)
        keys, inv = _keys(r)
        med = np.array([self.stats.get(k, (np.nan, np.nan, 0))[0] for k in keys])[inv]
        mad = np.array([self.stats.get(k, (np.nan, np.nan, 0))[1] for k in keys])[inv]
        resid = durations(r) - med
        with np.errstate(invalid="ignore"):
            slow = resid > np.maximum(SLOW_MADS * mad, SLOW_FLOOR * med)
        return resid, np.nan_to_num(slow).astype(bool)


@dataclass(frozen=True)
class Residuals:
    modelled: int  # kernels with a modelled key
    kernels: int
    excess_ns: float  # sum of residuals of the slow kernels (time they took beyond their median)
    net_ns: float  # sum of all residuals of modelled kernels (positive: slower than history)
    slow: int
    from_history: bool  # False: the model was fitted on this window itself


def summarize(model: KernelModel, r: Decoded, from_history: bool) -> Residuals:
    return summary_of(*model.residuals(r), from_history)


def summary_of(resid: np.ndarray, slow: np.ndarray, from_history: bool) -> Residuals:
    """The summary of per-kernel residuals (KernelModel.residuals), computed once per window."""
    ok = np.isfinite(resid)
    return Residuals(
        modelled=int(ok.sum()),
        kernels=len(resid),
        excess_ns=float(resid[slow].sum()),
        net_ns=float(resid[ok].sum()),
        slow=int(slow.sum()),
        from_history=from_history,
    )


class History:
    """A job's earlier windows, kept small: per kernel key the newest KEEP_RUNS durations, and each
    window's GPU-idle share. What the daemon holds per job instead of the windows themselves.
    Thread-safe: a duty window adds to it while an experiment's thread reads its model (H200,
    2026-12-03: "dictionary changed size during iteration" lost a trial's planning)."""

    KEEP_RUNS = 512
    KEEP_WINDOWS = 16

    def __init__(self) -> None:
        self._runs: dict[Key, np.ndarray] = {}
        self._idle: list[float] = []
        self.windows = 0
        self._lock = threading.Lock()

    def add(self, r: Decoded, idle_share: float) -> None:
        keys: list[Key] = []
        if len(r.kernels):
            keys, inv = _keys(r)
            d = durations(r)
            order = np.argsort(inv, kind="stable")
            bounds = np.searchsorted(inv[order], np.arange(len(keys) + 1))
        with self._lock:
            self.windows += 1
            self._idle = [*self._idle, idle_share][-self.KEEP_WINDOWS :]
            for i, key in enumerate(keys):
                new = d[order[bounds[i] : bounds[i + 1]]]
                old = self._runs.get(key)
                self._runs[key] = (new if old is None else np.concatenate([old, new]))[-self.KEEP_RUNS :]

    def model(self) -> KernelModel:
        stats = {}
        with self._lock:
            runs, windows = list(self._runs.items()), self.windows
        for key, d in runs:
            if len(d) < MIN_RUNS:
                continue
            med = float(np.median(d))
            stats[key] = (med, MAD_SCALE * float(np.median(np.abs(d - med))), len(d))
        return KernelModel(stats, windows)

    def idle_share(self) -> float | None:
        idle = self._idle  # replaced whole, never mutated in place
        return float(np.mean(idle)) if idle else None
