"""Summaries and time-aligned series of a window's context (gitmd/capture/context.py): the job's
threads on the host, its cores' load by others, its GPUs' clocks, throttling and co-tenants."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gitmd.records import HOST_DTYPE, REASON_BITS, THROTTLING_REASONS, WindowContext, decode_reasons

THROTTLE_MASK = sum(REASON_BITS[r] for r in THROTTLING_REASONS)
# Running at the enforced power limit is the board's ceiling, not a fault: counted apart from the
# thermal and hardware slowdowns that cost a job time it could have had.
POWER_CAP_MASK = REASON_BITS["sw_power_cap"]
SLOWDOWN_MASK = THROTTLE_MASK & ~POWER_CAP_MASK


@dataclass(frozen=True)
class HostStats:
    samples: int
    span_ns: int
    cores: tuple[int, ...]
    threads: int
    main_tid: int
    main_run_ns: int  # the busiest thread, over the window
    main_wait_ns: int  # ... runnable but not running
    job_run_ns: int
    job_wait_ns: int
    others_load: float  # share of the job's cores' time used by other tasks

    @property
    def main_wait_share(self) -> float:
        return self.main_wait_ns / self.span_ns if self.span_ns else 0.0


@dataclass(frozen=True)
class GpuStats:
    samples: int
    gpus: tuple[int, ...]
    throttled_share: float  # of samples with a thermal or hardware slowdown reason set
    reasons: tuple[str, ...]  # the slowdown reasons seen
    clock_ratio_throttled: float  # mean SM clock / max while slowed down (1.0 when never)
    power_capped_share: float  # of samples at the enforced power limit (sw_power_cap)
    clock_ratio_capped: float  # mean SM clock / max while power-capped (1.0 when never)
    power_limit_w: float
    cotenants: int  # most other processes seen at once on the job's GPUs
    cotenant_share: float  # of samples with another process active (SM utilization > 0)
    cotenant_sm_pct: float  # their mean SM utilization while active
    util_pct: float  # mean device utilization


def host_stats(ctx: WindowContext) -> HostStats | None:
    h = ctx.host
    if len(h) < 2:
        return None
    first, last = h[0], h[-1]
    d = {k: int(last[k]) - int(first[k]) for k in HOST_DTYPE.names or () if k != "job_threads"}
    others = 0.0
    if d["cores_total_ns"] > 0:
        others = max(0.0, min(1.0, (d["cores_busy_ns"] - d["job_run_ns"]) / d["cores_total_ns"]))
    return HostStats(
        samples=len(h),
        span_ns=d["t_ns"],
        cores=ctx.cores,
        threads=int(h["job_threads"].max()),
        main_tid=ctx.main_tid,
        main_run_ns=d["main_run_ns"],
        main_wait_ns=d["main_wait_ns"],
        job_run_ns=d["job_run_ns"],
        job_wait_ns=d["job_wait_ns"],
        others_load=others,
    )


def gpu_stats(ctx: WindowContext) -> GpuStats | None:
    g = ctx.gpu
    if len(g) == 0:
        return None
    throttled = (g["reasons"] & SLOWDOWN_MASK) != 0
    capped = (g["reasons"] & POWER_CAP_MASK) != 0
    seen = 0
    for m in np.unique(g["reasons"][throttled]).tolist():
        seen |= int(m)
    ratio = g["sm_clock_mhz"] / g["sm_clock_max_mhz"]
    ratio_t = ratio[throttled & np.isfinite(ratio)]
    ratio_c = ratio[capped & np.isfinite(ratio)]
    limit = g["power_limit_mw"][np.isfinite(g["power_limit_mw"])]
    active = (g["others"] > 0) & (np.nan_to_num(g["others_sm_pct"]) > 0)
    util = g["util_pct"][np.isfinite(g["util_pct"])]
    return GpuStats(
        samples=len(g),
        gpus=ctx.gpus,
        throttled_share=float(throttled.mean()),
        reasons=tuple(r for r in decode_reasons(seen & SLOWDOWN_MASK)),
        clock_ratio_throttled=float(ratio_t.mean()) if len(ratio_t) else 1.0,
        power_capped_share=float(capped.mean()),
        clock_ratio_capped=float(ratio_c.mean()) if len(ratio_c) else 1.0,
        power_limit_w=float(limit.mean()) / 1000 if len(limit) else float("nan"),
        cotenants=int(g["others"].max()),
        cotenant_share=float(active.mean()),
        cotenant_sm_pct=float(g["others_sm_pct"][active].mean()) if active.any() else 0.0,
        util_pct=float(util.mean()) if len(util) else float("nan"),
    )


def _hold(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The value in force at each bin's end (the last sample at or before it), per bin."""
    ends = edges[1:]
    i = np.searchsorted(t, ends, side="right") - 1
    out = v[np.clip(i, 0, len(v) - 1)].astype(np.float64)
    out[i < 0] = v[0] if len(v) else np.nan
    return out


def _rate(t: np.ndarray, cumulative: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """A cumulative counter's increase per bin, over the bin's width (interpolated at the edges)."""
    at = np.interp(edges, t.astype(np.float64), cumulative.astype(np.float64))
    return np.diff(at) / np.diff(edges)


def series(ctx: WindowContext, edges: np.ndarray) -> dict[str, np.ndarray]:
    """Context series on bins with these realtime edges (ns): the candidate causes."""
    out: dict[str, np.ndarray] = {}
    h = ctx.host
    if len(h) >= 2:
        t = h["t_ns"]
        busy = _rate(t, h["cores_busy_ns"], edges)
        total = _rate(t, h["cores_total_ns"], edges)
        run = _rate(t, h["job_run_ns"], edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["host_others_load"] = np.nan_to_num(np.clip((busy - run) / total, 0, 1))
        out["main_wait"] = _rate(t, h["main_wait_ns"], edges)
    g = ctx.gpu
    if len(g):
        # several GPUs: the first the job runs on (rows of one GPU are in time order)
        one = g[g["gpu"] == g["gpu"][0]]
        t = one["t_ns"]
        ratio = np.nan_to_num(one["sm_clock_mhz"] / one["sm_clock_max_mhz"], nan=1.0)
        out["sm_clock_deficit"] = _hold(t, 1.0 - ratio, edges)
        out["throttled"] = _hold(t, ((one["reasons"] & SLOWDOWN_MASK) != 0).astype(np.float64), edges)
        out["power_capped"] = _hold(t, ((one["reasons"] & POWER_CAP_MASK) != 0).astype(np.float64), edges)
        out["power_w"] = _hold(t, np.nan_to_num(one["power_mw"]) / 1000.0, edges)
        out["temperature_c"] = _hold(t, np.nan_to_num(one["temperature_c"]), edges)
        out["cotenant_sm_pct"] = _hold(t, np.nan_to_num(one["others_sm_pct"]), edges)
    return out
