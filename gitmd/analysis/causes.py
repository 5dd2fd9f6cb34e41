"""Causes of lost time, ranked by what each cost the window, with their evidence; and the one table
from causes to the lever classes that may recover it, which the experiment engine follows: no lever
is tried unless a cause above threshold selects it (or an operator asks for it).

What each cause costs (within one window of the job's busiest process):
- host_contention: the busiest thread's run-queue wait (runnable, not running: /proc schedstat),
  capped by the GPU idle time it can explain (launch gaps and post-sync refills);
- launch_bound: launch gaps left after host contention and co-tenants took their part;
- sync_stall: GPU idle right after a synchronization returned;
- pageable_copy: what the pageable copies would have saved at the host's pinned bandwidth;
- allocator: GPU idle right after an allocation or free;
- cotenant: with another process active on the job's GPU: the kernels' time beyond their history,
  plus the growth of idle time against history; without history, the co-tenants' SM share of the
  job's kernel time;
- throttling: kernel time during thermally or hardware slowed-down samples times the clock lost
  (1 - clock/max);
- power_cap: the same at the enforced power limit. Reported, never above threshold: at the
  board's limit that is its ceiling (only the device lever — a higher limit — changes it);
- fp32_gemm: fp32 GEMMs (cuBLAS) not on tensor cores, at the saving TF32 measured on the H200 (5.5x);
- conv_fp32: cuDNN convolutions on fp32 cores (FFMA implicit GEMMs, FFT, Winograd, the backward
  filter's algorithm 0): what cuDNN runs by default without autotuning, while its autotuner may pick
  TF32 tensor-core algorithms (PyTorch allows TF32 convolutions by default) — at the same 5.5x;
- kernel_slowdown: kernels slower than their history that nothing above explains;
- communication: collectives (NCCL's kernels) no other kernel of the process ran beside (exposed), a
  rank's wait for its slowest peer included. No lever: NCCL's documentation (Environment Variables)
  files its algorithm, protocol, channel, thread and buffer-size variables under "Debugging": fine
  for experiments, not to be kept in production (they may cause "sub-optimal behavior, crashes, or
  hangs", and NCCL_PROTO may corrupt data where LL128 is unsupported), and its system-configuration
  variables select networks, not collectives on one host: a policy gitmd keeps is production. What
  it shows is where the step goes; the straggler (gitmd.analysis.stragglers) is what a lever acts on;
- stream_starved: time the host waited on a stream (stream synchronizations) while that stream ran
  no kernel and the process's other streams did: its work queued behind theirs, which a higher
  priority for the waited stream lets through first.
A cause is above threshold when it cost at least THRESHOLD of the window.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gitmd.analysis.breakdown import Breakdown, merge_intervals
from gitmd.analysis.causality import GrangerTest
from gitmd.analysis.context_stats import GpuStats, HostStats
from gitmd.analysis.hostbuffers import hot_pageable_buffers, to_pin
from gitmd.analysis.model import Residuals
from gitmd.records import Decoded

THRESHOLD = 0.05
CACHE_RETURNED = 0.5  # share of frees with the GPU going idle at them: the allocator's cache handed back
TF32_SPEEDUP = 5.5  # fp32 MLP training with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 on the H200 (shared/GPU.md)

# Cause -> lever classes (gitmd/levers, the levers issue). The experiment engine reads only this.
LEVERS: dict[str, tuple[str, ...]] = {
    "host_contention": ("cpu_affinity", "sched_priority"),
    "launch_bound": ("cpu_affinity", "sched_priority", "cuda_device_max_connections", "dataloader_workers"),
    # a wait that sleeps until the driver's interrupt (blocking sync) wakes late: spin instead
    "sync_stall": ("sync_spin", "cpu_affinity", "sched_priority"),
    "pageable_copy": ("pin_host_buffer", "dataloader_pin_memory"),
    "allocator": (
        "alloc_expandable_segments",
        "alloc_gc_threshold",
        "alloc_max_split_size",
        "alloc_keep_cache",
        "alloc_keep_cache_live",
        "mempool_release",
    ),
    # Stream priorities act inside one CUDA context; another process's share of the GPU is reclaimed
    # only from a co-tenant registered as background, by holding its launches part of the time.
    "cotenant": ("cotenant_yield",),
    "throttling": ("power_limit", "clocks"),  # device levers: off unless allow_device_levers
    "power_cap": ("power_limit",),
    "fp32_gemm": ("tf32_override",),
    # cuDNN's autotuner (PyTorch's cudnn.benchmark, off by default) picks among every algorithm
    "conv_fp32": ("cudnn_benchmark",),
    # the host waits on one stream while the GPU runs another's kernels: raise the waited one
    "stream_starved": ("stream_priority",),
    "kernel_slowdown": (),
    # NCCL's tuning variables are its "Debugging" ones (see the module's docstring): none kept
    "communication": (),
}
# Granger series that support each cause when significant.
SUPPORT: dict[str, tuple[str, ...]] = {
    "host_contention": ("host_others_load", "main_wait"),
    "cotenant": ("cotenant_sm_pct",),
    "throttling": ("sm_clock_deficit", "throttled", "temperature_c"),
    "power_cap": ("sm_clock_deficit", "power_capped", "power_w"),
}
_FP32_GEMM = re.compile(r"sgemm|f32f32_f32f32|gemm.*_f32_|simt.*gemm|gemm.*simt", re.IGNORECASE)
_NOT_FP32 = re.compile(r"tf32|bf16|f16|fp16|hgemm|hmma|i8|e4m3|e5m2", re.IGNORECASE)
# cuDNN's convolution kernels (forward, backward data and filter; GEMM-based, FFT, Winograd, direct);
# batch norm and other cuDNN kernels are not convolutions
_CONV = re.compile(
    r"fprop|dgrad|wgrad|implicit_convolve|explicit_convolve|precomputed_convolve|winograd|fft2d|fft_?conv"
    r"|conv2d_|convolve_",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Cause:
    name: str
    cost_ns: float
    share: float  # of the window
    confidence: float  # 0..1
    evidence: tuple[str, ...]
    levers: tuple[str, ...]
    above_threshold: bool
    # The most of the job's time removing the cause could free: the plausibility bound of a lever
    # that targets it is 1 / (1 - ceiling). ``share`` is what the cause costs (for fp32_gemm, the
    # saving TF32 is expected to give); the ceiling is the whole time its mechanism occupies, and for
    # GPU-kernel time its share of the GPU's busy time, since the observer's own launch gaps only
    # dilute it in the window (H200 2026-12-03: fp32 GEMMs cost 23% of a window that CUPTI had made
    # launch-bound, and TF32 then gave the run 2.0x, the program's step 4.9x).
    ceiling: float = 0.0
    # Levers the window shows can reach less than the cause's share, and the most (a share of the
    # window) each can: what their gain is predicted at (choose.Choose.launch; queue_reach_ns). Not
    # their plausibility bound, which stays the ceiling: a bound can miss what the window cannot show.
    bounds: tuple[tuple[str, float], ...] = ()

    def bound(self, lever: str) -> float:
        """The most of the window ``lever`` can reach, where the window bounds it (1.0: unbounded)."""
        return min([1.0, *(b for n, b in self.bounds if n == lever)])


@dataclass
class _Builder:
    window_ns: float
    busy_ns: float = 0.0  # the GPU busy with kernels (union) in the window
    causes: list[Cause] = field(default_factory=list)

    def add(
        self,
        name: str,
        cost_ns: float,
        confidence: float,
        *evidence: str,
        eligible: bool = True,
        levers: tuple[str, ...] | None = None,
        scope_ns: float | None = None,
        kernel_time: bool = False,
        bounds: dict[str, float] | None = None,
    ) -> None:
        """``levers``: the cause's lever classes in the order this window's evidence puts them
        (default: LEVERS' order). ``scope_ns``: the time the cause's mechanism occupies when its
        cost is an estimated saving (default: the cost); ``kernel_time``: that time is GPU kernel
        time (its ceiling is then also taken over the GPU's busy time); ``bounds``: levers the window
        shows can reach less than the cause's share (Cause.bounds)."""
        cost = max(0.0, float(cost_ns))
        share = cost / self.window_ns if self.window_ns else 0.0
        scope = max(cost, float(scope_ns or 0.0))
        ceiling = max(share, scope / self.window_ns if self.window_ns else 0.0)
        if kernel_time and self.busy_ns:
            ceiling = max(ceiling, scope / self.busy_ns)
        self.causes.append(
            Cause(
                name,
                cost,
                share,
                max(0.0, min(1.0, confidence)),
                tuple(e for e in evidence if e),
                LEVERS[name] if levers is None else levers,
                eligible and share >= THRESHOLD,
                min(1.0, ceiling),
                tuple(sorted((bounds or {}).items())),
            )
        )


CACHE_LEVERS = ("alloc_keep_cache_live", "alloc_keep_cache")  # live first: decided within the run


def _cache_first(levers: tuple[str, ...]) -> tuple[str, ...]:
    return (*CACHE_LEVERS, *(x for x in levers if x not in CACHE_LEVERS))


# CUDA_DEVICE_MAX_CONNECTIONS: the driver's hardware work queues (connections) per device (CUDA's
# environment variables: 8 by default, 1 to 32). Streams share queues (a stream's place depends on
# when it was made, not on how busy it is: two busy streams among the many a framework makes may
# share one), and work waits behind other streams' work in its queue. On one stream nothing can.
MORE_QUEUES = "cuda_device_max_connections"


def busy_streams(r: Decoded) -> int:
    """The most streams the window's kernels, copies and memsets ran on, on any one device (a
    device's queues are its own, and CUPTI's stream ids are unique only within a context)."""
    parts = [a[["device", "stream_id"]] for a in (r.kernels, r.memcpys, r.memsets) if len(a)]
    if not parts:
        return 0
    pairs = np.unique(np.stack([np.concatenate([p["device"] for p in parts]).astype(np.int64),
                                np.concatenate([p["stream_id"] for p in parts]).astype(np.int64)], axis=1),
                      axis=0)  # fmt: skip
    return int(np.unique(pairs[:, 0], return_counts=True)[1].max())


def queue_reach_ns(r: Decoded) -> float:
    """The most GPU time more hardware queues could give back in the window: on the device where it
    is most, the time its kernels kept the GPU busy less the time its busiest stream's kernels did
    (every other stream's kernels run entirely beside that stream's: the best any queueing can do;
    kernels already overlapping count once). What the lever can reach, whatever the cause's share:
    it lets independent streams' kernels overlap and shortens no launch gap (the host's time between
    launches is the host's), so a launch-bound job whose GPU sits idle has almost nothing for it.

    Kernels only: a copy beside another stream's kernels in these windows was their input or their
    output, waited for on purpose, which no queue overlaps. Counted with copies, the bound of
    timm-validate-imagefolder (dev half) was 2-13% of its windows and its B arm ran 25% slower;
    kernels only, 0.1-0.6% (bench/results/2026-12-07-thirty-ninth-cpu-2.md). Not seen here: a
    queue held by work waiting on an event (the GPU idle while another stream's work waits behind it
    in the queue), which would take launch timestamps the shim does not record."""
    k = r.kernels
    if not len(k):
        return 0.0
    dev = k["device"].astype(np.int64)
    stream = k["stream_id"].astype(np.int64)
    start, end = k["start_ns"].astype(np.int64), k["end_ns"].astype(np.int64)
    best = 0.0
    for d in np.unique(dev):
        on = dev == d
        s, e = merge_intervals(start[on], end[on])
        union = float((e - s).sum())
        top = 0.0
        for x in np.unique(stream[on]):
            one = on & (stream == x)
            s, e = merge_intervals(start[one], end[one])
            top = max(top, float((e - s).sum()))
        best = max(best, union - top)
    return best


def _launch_levers(queue_share: float) -> tuple[str, ...]:
    """launch_bound's levers as this window's evidence allows: more hardware queues only when what
    they could reach (queue_reach_ns, a share of the window) is above the causes' threshold. Before
    2026-12-05 they were offered on any window, then for work on more than one stream, and planned
    at the launch gaps' share (up to 97%: a 33x "prediction"). Of the ten launch trials of the lever
    in the corpus files none was kept; seven ran a B arm, which ran 24-31% slower on three dev-half
    programs, 4-14% slower on three test-half ones and 13% faster on one (single-stream, one pair);
    its oracle measurements were 0.63-1.01x. In 59 committed capture windows it could reach 0.6% at
    most, except in cupy-stream-map-reduce's (11 streams: 16%), where it is still offered
    (bench/queue_reach.py, bench/results/2026-12-07-thirty-ninth-cpu-2.md)."""
    got = LEVERS["launch_bound"]
    return got if queue_share >= THRESHOLD else tuple(x for x in got if x != MORE_QUEUES)


def fp32_gemm_ns(r: Decoded) -> tuple[float, int]:
    """Time and count of fp32 GEMM kernels that do not use tensor cores (TF32 would); cuDNN's
    GEMM-based convolutions are convolutions (conv_fp32_ns), not GEMMs cuBLAS's override reaches."""
    return _time_of(
        r, lambda n: bool(_FP32_GEMM.search(n)) and not _NOT_FP32.search(n) and not _CONV.search(n)
    )


def conv_fp32_ns(r: Decoded) -> tuple[float, int]:
    """Time and count of cuDNN convolution kernels on fp32 cores (not tensor cores)."""
    return _time_of(r, lambda n: bool(_CONV.search(n)) and not _NOT_FP32.search(n))


def _time_of(r: Decoded, chosen: Callable[[str], bool]) -> tuple[float, int]:
    k = r.kernels
    if not len(k):
        return 0.0, 0
    ids = [i for i, n in r.names.items() if chosen(n)]
    if not ids:
        return 0.0, 0
    sel = np.isin(k["name_id"], ids)
    d = (k["end_ns"][sel].astype(np.int64) - k["start_ns"][sel].astype(np.int64)).astype(np.float64)
    return float(d.sum()), int(sel.sum())


def _hot_buffers_evidence(r: Decoded) -> str:
    hot = hot_pageable_buffers(r)
    if not hot:
        return ""
    pin = to_pin(hot)
    said = f"{len(hot)} host buffer(s) copied again and again, {sum(h.bytes for h in hot) / 2**20:.0f} MiB"
    if len(pin) < len(hot):
        said += f"; {len(hot) - len(pin)} not waited for by the host after their copies (not pinnable)"
    return said


def _support(name: str, tests: list[GrangerTest]) -> tuple[float, str]:
    hits = [t for t in tests if t.significant and t.series in SUPPORT.get(name, ())]
    if not hits:
        return 0.0, ""
    best = min(hits, key=lambda t: t.q_value)
    return 0.25, f"Granger: {best.series} precedes {best.target} (lag {best.lag}, q={best.q_value:.3g})"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms"


def rank(
    b: Breakdown,
    records: Decoded,
    host: HostStats | None,
    gpu: GpuStats | None,
    resid: Residuals | None,
    history_idle_share: float | None,
    tests: list[GrangerTest],
) -> list[Cause]:
    """Causes of one window, largest cost first. ``history_idle_share``: the job's GPU-idle share in
    its history windows, when there is history."""
    w = float(b.window_ns)
    out = _Builder(w, float(b.kernels_ns))
    idle_gaps = float(b.launch_gap_ns + b.sync_stall_ns)
    cotenant_gap = 0.0
    if gpu is not None and gpu.cotenants and gpu.cotenant_share > 0:
        kernel_extra = resid.net_ns if resid is not None and resid.from_history else 0.0
        idle_now = (b.launch_gap_ns + b.sync_stall_ns + b.allocator_ns) / w if w else 0.0
        if history_idle_share is not None:
            cotenant_gap = max(0.0, idle_now - history_idle_share) * w
        share_est = gpu.cotenant_share * gpu.cotenant_sm_pct / 100.0 * b.kernels_ns
        cost = max(max(0.0, kernel_extra) + cotenant_gap, share_est)
        s, ev = _support("cotenant", tests)
        out.add(
            "cotenant",
            cost,
            0.5 + 0.25 * (kernel_extra > 0 or cotenant_gap > 0) + s,
            f"{gpu.cotenants} other process(es) on GPU {','.join(map(str, gpu.gpus))}, active in "
            f"{100 * gpu.cotenant_share:.0f}% of samples at {gpu.cotenant_sm_pct:.0f}% SM",
            f"kernels {_ms(kernel_extra)} slower than their history" if kernel_extra > 0 else "",
            f"GPU idle {_ms(cotenant_gap)} more than in history" if cotenant_gap > 0 else "",
            ev,
            kernel_time=True,
        )
    host_cost = 0.0
    if host is not None and host.span_ns:
        scale = w / host.span_ns
        host_cost = min(idle_gaps, host.main_wait_ns * scale)
        s, ev = _support("host_contention", tests)
        out.add(
            "host_contention",
            host_cost,
            min(1.0, 0.4 + host.main_wait_share + s),
            f"the busiest thread ({host.main_tid}) waited for a CPU {100 * host.main_wait_share:.1f}% of "
            f"the window (runnable, not running)",
            f"other tasks used {100 * host.others_load:.0f}% of the job's {len(host.cores)} core(s)",
            ev,
        )
    launch = max(0.0, b.launch_gap_ns - max(0.0, host_cost - b.sync_stall_ns) - cotenant_gap)
    kernels = max(1, b.kernels)
    streams = busy_streams(records)
    queues = queue_reach_ns(records) / w if w else 0.0
    out.add(
        "launch_bound",
        launch,
        0.5 + 0.5 * min(1.0, launch / w) if w else 0.0,
        f"GPU idle between the job's work {100 * b.launch_gap_ns / w:.1f}% of the window" if w else "",
        f"{b.kernels} kernels, {b.kernels_ns / kernels / 1e3:.1f} us each on average",
        f"work on {streams} stream(s)" if streams else "",
        f"kernels of other streams than the busiest {100 * queues:.1f}% of the window (the most more "
        f"hardware queues could overlap)"
        if streams > 1
        else "",
        levers=_launch_levers(queues),
        bounds={MORE_QUEUES: queues},
    )
    out.add(
        "sync_stall",
        b.sync_stall_ns,
        0.5 + 0.5 * min(1.0, b.sync_stall_ns / w) if w else 0.0,
        f"{b.sync_count} synchronizations; the GPU sat idle {_ms(b.sync_stall_ns)} after they returned",
    )
    out.add(
        "pageable_copy",
        b.pageable_saving_ns,
        0.9 if b.pageable_copies else 0.0,
        f"{b.pageable_copies} pageable copies, {b.pageable_bytes / 2**20:.0f} MiB in {_ms(b.pageable_ns)}; "
        f"at {b.pinned_bytes_per_s / 1e9:.1f} GB/s pinned they take {_ms(b.pageable_saving_ns)} less",
        _hot_buffers_evidence(records) if b.pageable_copies else "",
        scope_ns=b.pageable_ns,
    )
    # A caching allocator calls cudaFree only when it hands its cache back (torch.cuda.empty_cache,
    # or a retry after a failed allocation), and cudaFree drains the GPU: when most frees do, the
    # cache is being returned and keeping it is the direct fix; the allocator settings (fragmentation,
    # splitting) come after it.
    returned = b.free_count > 0 and b.syncing_frees >= CACHE_RETURNED * b.free_count
    out.add(
        "allocator",
        b.allocator_ns,
        0.5 + 0.5 * min(1.0, b.allocator_ns / w) if w else 0.0,
        f"{b.alloc_count} allocations and {b.free_count} frees ({b.syncing_frees} with the GPU going idle "
        f"at them); GPU idle {_ms(b.allocator_ns)} after them",
        "the cache is handed back: most frees drain the GPU" if returned else "",
        levers=_cache_first(LEVERS["allocator"]) if returned else None,
    )
    if gpu is not None:
        cost = b.kernels_ns * gpu.throttled_share * (1.0 - gpu.clock_ratio_throttled)
        s, ev = _support("throttling", tests)
        out.add(
            "throttling",
            cost,
            (0.6 + s) if gpu.throttled_share else 0.0,
            f"throttled ({', '.join(gpu.reasons)}) in {100 * gpu.throttled_share:.0f}% of samples at "
            f"{100 * gpu.clock_ratio_throttled:.0f}% of the maximum SM clock"
            if gpu.throttled_share
            else "no thermal or hardware slowdown in any sample",
            ev,
            kernel_time=True,
        )
        if gpu.power_capped_share:
            s, ev = _support("power_cap", tests)
            out.add(
                "power_cap",
                b.kernels_ns * gpu.power_capped_share * (1.0 - gpu.clock_ratio_capped),
                0.6 + s,
                f"at the enforced power limit ({gpu.power_limit_w:.0f} W) in "
                f"{100 * gpu.power_capped_share:.0f}% "
                f"of samples, SM clock at {100 * gpu.clock_ratio_capped:.0f}% of its maximum: the board's "
                "ceiling unless its limit was lowered",
                ev,
                eligible=False,
                kernel_time=True,
            )
    starved_ns, starved_id, waited_ns = starved_stream(records)
    if starved_ns > 0:
        out.add(
            "stream_starved",
            starved_ns,
            0.6,
            f"the host waited {_ms(waited_ns)} on stream {starved_id}; for {_ms(starved_ns)} of it the "
            "GPU ran other streams' kernels and none of that stream's",
        )
    f32_ns, f32_n = fp32_gemm_ns(records)
    out.add(
        "fp32_gemm",
        f32_ns * (1.0 - 1.0 / TF32_SPEEDUP),
        0.7 if f32_n else 0.0,
        f"{f32_n} fp32 GEMMs off the tensor cores, {_ms(f32_ns)}" if f32_n else "",
        scope_ns=f32_ns,
        kernel_time=True,
    )
    conv_ns, conv_n = conv_fp32_ns(records)
    out.add(
        "conv_fp32",
        conv_ns * (1.0 - 1.0 / TF32_SPEEDUP),
        0.5 if conv_n else 0.0,  # lower than fp32_gemm's: the job may autotune already
        f"{conv_n} cuDNN convolutions on fp32 cores, {_ms(conv_ns)}" if conv_n else "",
        scope_ns=conv_ns,
        kernel_time=True,
    )
    if b.collectives:
        out.add(
            "communication",
            b.communication_ns,
            0.6,
            f"{b.collectives} collective kernels; {_ms(b.communication_ns)} with no other kernel beside them "
            f"(a wait for the slowest rank included), {_ms(b.overlapped_comm_ns)} hidden under compute",
            "no lever: NCCL's documentation files its algorithm, protocol, channel and buffer-size "
            "variables under Debugging (for experiments, not production); gitmd keeps none of them",
        )
    if resid is not None and resid.excess_ns > 0:
        explained = sum(c.cost_ns for c in out.causes if c.name in ("cotenant", "throttling", "power_cap"))
        rest = resid.excess_ns - explained
        anything = [t for t in tests if t.significant and t.target == "kernel_residual"]
        out.add(
            "kernel_slowdown",
            rest,
            0.3 + 0.3 * bool(anything),
            f"{resid.slow} of {resid.modelled} modelled kernels ran slower than their "
            + ("history" if resid.from_history else "median in this window")
            + f", {_ms(resid.excess_ns)} in all",
            "; ".join(f"{t.series} precedes it (q={t.q_value:.3g})" for t in anything[:3]),
            kernel_time=True,
        )
    return sorted(out.causes, key=lambda c: -c.cost_ns)


STREAM_SYNC = 3  # CUpti_ActivitySynchronizationType: stream synchronize


def _inside(x: np.ndarray, merged: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    s, e = merged
    if not len(s):
        return np.zeros(len(x), dtype=bool)
    i = np.searchsorted(s, x, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(x), dtype=bool)
    out[ok] = x[ok] < e[i[ok]]
    return out


def starved_stream(r: Decoded) -> tuple[float, int, float]:
    """(starved ns, stream id, waited ns) of the stream the host waited on longest while only other
    streams' kernels ran; (0, 0, 0) when no stream was starved (one stream, no stream syncs)."""
    k, y = r.kernels, r.syncs
    if not len(k) or not len(y):
        return 0.0, 0, 0.0
    y = y[(y["sync_type"] == STREAM_SYNC) & (y["end_ns"] > y["start_ns"])]
    streams = np.unique(k["stream_id"])
    if not len(y) or len(streams) < 2:
        return 0.0, 0, 0.0
    best = (0.0, 0, 0.0)
    for sid in np.unique(y["stream_id"]):
        mine = k["stream_id"] == sid
        if not mine.any() or mine.all():
            continue
        waits = merge_intervals(y["start_ns"][y["stream_id"] == sid], y["end_ns"][y["stream_id"] == sid])
        own = merge_intervals(k["start_ns"][mine], k["end_ns"][mine])
        other = merge_intervals(k["start_ns"][~mine], k["end_ns"][~mine])
        edges = np.unique(np.concatenate([*waits, *own, *other]))
        if len(edges) < 2:
            continue
        mid = (edges[:-1] + edges[1:]) // 2
        seg = np.diff(edges).astype(np.float64)
        starved = _inside(mid, waits) & _inside(mid, other) & ~_inside(mid, own)
        cost = float(seg[starved].sum())
        if cost > best[0]:
            best = (cost, int(sid), float((waits[1] - waits[0]).sum()))
    return best
