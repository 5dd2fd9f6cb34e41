"""Granger tests of the window's context series against the job's own slowdowns.

Targets, per bin of fixed width over the window: the kernels' residual time against their expected
durations (model.py) and the GPU's idle time between the job's work. Candidate causes: the context
series (context_stats.series): SM clock deficit, throttle flag, power, temperature, other tasks'
load on the job's cores, the busiest thread's run-queue wait, co-tenants' SM utilization.

Each pair is tested at lags 1..MAX_LAG with statsmodels' Granger F-test (ssr_ftest). A series that an
augmented Dickey-Fuller test cannot call stationary is differenced first (both of the pair); a series
that does not vary cannot be tested and says so. The smallest p-value over lags is Bonferroni-corrected
for the lags tried, and all pairs of the window together are corrected with Benjamini-Hochberg.
Granger precedence is evidence, not proof: causes.py weighs it beside the direct measurements.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from gitmd.records import Decoded

MAX_LAG = 3
ALPHA = 0.05
MIN_BINS = 20  # fewer bins than this: not tested
ADF_P = 0.05


@dataclass(frozen=True)
class GrangerTest:
    target: str
    series: str
    lag: int  # the lag with the smallest p-value (0 when not tested)
    p_value: float  # Bonferroni over lags; NaN when not tested
    q_value: float  # Benjamini-Hochberg over the window's tests; NaN when not tested
    significant: bool
    differenced: bool
    note: str = ""


def edges_for(start_ns: int, end_ns: int, bin_ns: int) -> np.ndarray:
    n = max(1, (end_ns - start_ns) // bin_ns)
    return start_ns + bin_ns * np.arange(n + 1, dtype=np.int64)


def _per_bin(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(edges, t, side="right") - 1
    ok = (idx >= 0) & (idx < len(edges) - 1)
    return np.bincount(idx[ok], weights=v[ok], minlength=len(edges) - 1).astype(np.float64)


def targets(r: Decoded, offset_ns: int, resid: np.ndarray, edges: np.ndarray) -> dict[str, np.ndarray]:
    """The job's slowdown series on bins with realtime ``edges``; ``offset_ns`` maps CUPTI time to
    realtime; ``resid``: each kernel's residual against its expected duration (NaN: not modelled)."""
    out: dict[str, np.ndarray] = {}
    k = r.kernels
    if not len(k):
        return out
    start = k["start_ns"].astype(np.int64) + offset_ns
    ok = np.isfinite(resid)
    if ok.any():
        out["kernel_residual"] = _per_bin(start[ok], resid[ok], edges)
    # GPU idle per bin: bin width minus the union of the job's kernels and copies inside it
    s = np.concatenate([start, r.memcpys["start_ns"].astype(np.int64) + offset_ns])
    e = np.concatenate(
        [k["end_ns"].astype(np.int64) + offset_ns, r.memcpys["end_ns"].astype(np.int64) + offset_ns]
    )
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    us, ue = s[idx], np.maximum.reduceat(e, idx)
    busy = np.zeros(len(edges) - 1)
    for i in range(len(edges) - 1):  # bins are few (tens to hundreds)
        lo, hi = edges[i], edges[i + 1]
        a, b = np.searchsorted(ue, lo, side="right"), np.searchsorted(us, hi, side="left")
        if b > a:
            busy[i] = float((np.minimum(ue[a:b], hi) - np.maximum(us[a:b], lo)).clip(0).sum())
    out["gpu_idle"] = np.diff(edges).astype(np.float64) - busy
    return out


def _stationary(x: np.ndarray) -> bool:
    from statsmodels.tsa.stattools import adfuller

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(adfuller(x, maxlag=MAX_LAG, autolag=None)[1] < ADF_P)
    except (ValueError, np.linalg.LinAlgError):
        return True


def _untestable(x: np.ndarray) -> bool:
    return bool(
        len(x) < MIN_BINS or not np.all(np.isfinite(x)) or np.ptp(x) <= 1e-12 * max(1.0, np.abs(x).max())
    )


def granger(tgts: dict[str, np.ndarray], causes: dict[str, np.ndarray]) -> list[GrangerTest]:
    """Every (target, cause) pair tested; q-values corrected over the tests that ran."""
    from statsmodels.stats.multitest import multipletests
    from statsmodels.tsa.stattools import grangercausalitytests

    out: list[GrangerTest] = []
    ran: list[int] = []
    for tname, y in tgts.items():
        for cname, x in causes.items():
            if len(x) != len(y):
                out.append(GrangerTest(tname, cname, 0, np.nan, np.nan, False, False, "misaligned"))
                continue
            if _untestable(y) or _untestable(x):
                why = f"too few bins ({len(y)} < {MIN_BINS})" if len(y) < MIN_BINS else "does not vary"
                out.append(GrangerTest(tname, cname, 0, np.nan, np.nan, False, False, why))
                continue
            diff = not (_stationary(y) and _stationary(x))
            yy, xx = (np.diff(y), np.diff(x)) if diff else (y, x)
            if _untestable(yy) or _untestable(xx):
                out.append(GrangerTest(tname, cname, 0, np.nan, np.nan, False, diff, "does not vary"))
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = grangercausalitytests(np.column_stack([yy, xx]), maxlag=MAX_LAG)
            except (ValueError, np.linalg.LinAlgError) as e:
                out.append(GrangerTest(tname, cname, 0, np.nan, np.nan, False, diff, f"test failed: {e}"))
                continue
            p = {lag: float(r[0]["ssr_ftest"][1]) for lag, r in res.items()}
            lag = min(p, key=lambda k: p[k])
            ran.append(len(out))
            out.append(GrangerTest(tname, cname, lag, min(1.0, p[lag] * len(p)), np.nan, False, diff))
    if ran:
        reject, q, _, _ = multipletests([out[i].p_value for i in ran], alpha=ALPHA, method="fdr_bh")
        for i, rj, qv in zip(ran, reject.tolist(), q.tolist(), strict=True):
            t = out[i]
            out[i] = GrangerTest(t.target, t.series, t.lag, t.p_value, float(qv), bool(rj), t.differenced)
    return out
