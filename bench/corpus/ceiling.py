#!/usr/bin/env python3
"""How close a GEMM- or copy-bound corpus program comes to the GPU's ceiling (issue 26, item 3):
its throughput by its own clock against a peak measured on the same GPU in the same call.

A manifest entry says what one reading of its clock is worth (`work`):

    work = { peak = "fp32_gemm", per_clock = 137438953472, clock_s = 0.001 }

- `peak`: which measured peak it is held to (PEAKS);
- `per_clock`: the FLOPs (a GEMM peak) or bytes (a copy peak) done in the span one reading of
  its clock times, from its command (cupy-sgemm's 4096^3 SGEMM: 2 x 4096^3 FLOPs a reading);
- `clock_s`: the clock's unit in seconds (its readings are ms: 0.001).

Its throughput is per_clock / (reading x clock_s), in the peak's unit (TFLOP/s or GB/s); its
fraction of the ceiling is that over the peak. Only programs whose work follows from their own
command get an entry: nothing here is estimated.

The peaks are measured by this script run as its own process (the scoreboard's process never
holds a CUDA context beside the programs it times), with torch, CUDA events, after a warm-up, the
best of `--trials` timed batches (a peak, not a typical figure):

- fp32_gemm: 8192^3 float32 matmul with TF32 off (the FLOPs an fp32 program asks for);
- bf16_gemm: 8192^3 bfloat16 matmul;
- h2d_pinned / d2h_pinned: 1 GiB copies between page-locked host memory and the device.

    python3 bench/corpus/ceiling.py --peaks fp32_gemm,h2d_pinned [--trials 5]   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

# a peak's unit: what a program's per_clock is divided by to be in it
PEAKS = {
    "fp32_gemm": ("TFLOP/s", 1e12),
    "bf16_gemm": ("TFLOP/s", 1e12),
    "h2d_pinned": ("GB/s", 1e9),
    "d2h_pinned": ("GB/s", 1e9),
}


def check_work(work: dict[str, Any]) -> str:
    """Why a manifest entry's `work` is not usable ("" : it is)."""
    if work.get("peak") not in PEAKS:
        return f"work.peak must be one of {sorted(PEAKS)}, not {work.get('peak')!r}"
    for key in ("per_clock", "clock_s"):
        x = work.get(key)
        if not isinstance(x, int | float) or isinstance(x, bool) or not x > 0:
            return f"work.{key} must be a positive number, not {x!r}"
    return ""


def throughput(work: dict[str, Any], reading: float) -> float | None:
    """What one clock reading says the program did, in its peak's unit (None: no reading)."""
    if not reading or reading <= 0:
        return None
    _, scale = PEAKS[work["peak"]]
    return float(work["per_clock"]) / (reading * float(work["clock_s"])) / scale


def ceiling(
    work: dict[str, Any], plain: list[float], gitmd: list[float], peaks: dict[str, Any]
) -> dict[str, Any]:
    """The program's share of the measured peak: the median of its plain runs' readings and of its
    runs through gitmd. Fields are null where nothing was measured (no peak, no reading)."""
    unit, _ = PEAKS[work["peak"]]
    peak = (peaks.get(work["peak"]) or {}).get("value")
    out: dict[str, Any] = {"peak": work["peak"], "unit": unit, "peak_value": peak}
    for side, readings in (("plain", plain), ("gitmd", gitmd)):
        xs = [x for x in readings if x]
        got = throughput(work, statistics.median(xs)) if xs else None
        out[f"{side}_value"] = None if got is None else round(got, 3)
        out[f"{side}_fraction"] = None if got is None or not peak else round(got / peak, 4)
    return out


def measure(names: list[str], trials: int) -> dict[str, Any]:
    """Each named peak on this process's GPU (see the module's docstring)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the peaks are measured on the GPU the programs ran on")
    dev = torch.device("cuda")
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__}

    def best(fn: Any, reps: int) -> float:
        """The shortest of `trials` timed batches of `reps` calls, seconds per call."""
        for _ in range(3):
            fn()  # warm-up: cuBLAS heuristics, clocks up
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / reps)
        return min(times)

    for name in names:
        if name not in PEAKS:
            raise SystemExit(f"unknown peak {name!r}; known: {sorted(PEAKS)}")
        unit, scale = PEAKS[name]
        if name.endswith("_gemm"):
            n = 8192
            dtype = torch.float32 if name == "fp32_gemm" else torch.bfloat16
            torch.backends.cuda.matmul.allow_tf32 = False
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            s = best(lambda a=a, b=b: torch.matmul(a, b), 10)
            value = 2 * n**3 / s / scale
            how = f"{n}^3 matmul, {dtype}, TF32 off"
            del a, b
        else:
            nbytes = 1 << 30
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            devbuf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst, src = (devbuf, host) if name == "h2d_pinned" else (host, devbuf)
            s = best(lambda dst=dst, src=src: dst.copy_(src, non_blocking=True), 5)
            value = nbytes / s / scale
            how = "1 GiB copy, page-locked host memory"
            del host, devbuf
        out[name] = {"value": round(value, 3), "unit": unit, "how": how, "trials": trials}
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peaks", required=True, help=f"comma-separated: {', '.join(PEAKS)}")
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args(argv)
    print(json.dumps(measure([x for x in a.peaks.split(",") if x], a.trials)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
