"""Launch levers: environment variables of the job's next launch.

``apply`` adds to the launch plan's environment; ``verify`` reads the launched process's
environment back from /proc (when it runs); ``revert`` restores the plan to what ``capture`` saw.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from gitmd.levers.base import Kind, Lever, LeverError, Risk, Target

# gitmd's sitecustomize for the framework knobs (GITMD_* variables); a launch plan that holds one
# of them names this directory in GITM_SITE and the launcher puts it first on PYTHONPATH.
SITE_DIR = Path(__file__).resolve().parent / "site"
KNOB_PREFIX = "GITMD_"
# In a captured job's plan while a live lever that needs it may run: gitmd's sitecustomize wraps the
# framework calls those levers switch, and each call asks the shim in the process for its flag.
LIVE_FLAGS_VAR = "GITMD_LIVE_FLAGS"
LIVE_FLAG_LEVERS = ("alloc_keep_cache_live",)


MAX_ACTED = 16
KNOB_NAME = re.compile(r"^GITMD_[A-Z0-9_]{1,58}$")
# the knobs whose sitecustomize hook reports when it changed something (GITMD_SITE_REPORT)
SITE_REPORTED = (
    "GITMD_CUDNN_BENCHMARK",
    "GITMD_DATALOADER_PIN_MEMORY",
    "GITMD_DATALOADER_WORKERS",
    "GITMD_KEEP_CACHE",
)


@dataclass(frozen=True)
class SiteReport:
    """What gitmd's sitecustomize said it did in a run's processes (through the launcher's
    GITMD_SITE_REPORT file): ``loaded``: it adjusted PyTorch in one of them at least (imported, the
    knobs put in place), and the knobs whose variable changed something (``acted``)."""

    loaded: bool
    acted: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.acted) > MAX_ACTED or not all(KNOB_NAME.match(x) for x in self.acted):
            raise ValueError(f"at most {MAX_ACTED} acted knobs, each a GITMD_* variable name")


def untouched(values: Mapping[str, str], site: SiteReport | None) -> str:
    """Why a run with these launch ``values`` was not changed by them ("" : it may have been): every
    variable is a knob of gitmd's sitecustomize that reports what it does (SITE_REPORTED: nothing
    else reads them), the site adjusted PyTorch in the run, and none of them changed anything there.
    Unknown (no report, PyTorch never adjusted, a variable a library reads) is never "untouched"."""
    knobs = [k for k in values if k != "GITM_SITE"]
    if site is None or not site.loaded or not knobs or not all(k in SITE_REPORTED for k in knobs):
        return ""
    if set(knobs) & set(site.acted):
        return ""
    return (
        f"gitmd's sitecustomize adjusted PyTorch in the run and {', '.join(sorted(knobs))} changed nothing "
        "there (the program never reached what it changes)"
    )


def with_site(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus GITM_SITE when a framework knob is in it."""
    out = dict(env)
    if any(k.startswith(KNOB_PREFIX) for k in out):
        out["GITM_SITE"] = str(SITE_DIR)
    return out


def job_environment(base: Mapping[str, str], additions: Mapping[str, str]) -> dict[str, str]:
    """What a launcher runs the job with: ``base`` (its own environment) plus the plan's
    ``additions``; with a framework knob among them, gitmd's site directory first on PYTHONPATH;
    with the free guard (``GITM_GUARD``), the guard first on LD_PRELOAD."""
    env = {**base, **with_site(additions)}
    for var, path in (("PYTHONPATH", env.get("GITM_SITE")), ("LD_PRELOAD", env.get("GITM_GUARD"))):
        if path:
            current = base.get(var)
            env[var] = f"{path}:{current}" if current else path
    return env


def process_env(pid: int) -> dict[str, str]:
    try:
        raw = open(f"/proc/{pid}/environ", "rb").read()  # noqa: SIM115 - small, read at once
    except OSError as e:
        raise LeverError(f"cannot read the environment of pid {pid}: {e.strerror}") from None
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[os.fsdecode(k)] = os.fsdecode(v)
    return out


class EnvLever(Lever):
    """Set environment variables for the next launch."""

    kind = Kind.LAUNCH
    variables: tuple[str, ...] = ()  # a class's own; PolicyEnv's per instance
    # the same change made live (a lever of gitmd.levers.shim_knobs): tried within the run first; a
    # job that had it tried live gets no launch trial of this one
    live_form: ClassVar[str] = ""
    # the library that reads its variables ("torch": PyTorch, through its own variable or gitmd's
    # sitecustomize); "" : any CUDA process (the driver or runtime reads it) — a process that never
    # loads that library is not changed by it (the corpus oracle does not measure it there)
    acts_through: ClassVar[str] = "torch"

    def values(self) -> dict[str, str]:
        raise NotImplementedError

    def resources(self) -> frozenset[str]:
        return frozenset(f"env:{v}" for v in self.variables)

    def capture(self, target: Target) -> dict[str, Any]:
        return {"env": {v: target.env.get(v) for v in self.variables}}

    def apply(self, target: Target) -> None:
        target.env.update(self.values())

    def verify(self, target: Target) -> None:
        want = self.values()
        for k, v in want.items():
            if target.env.get(k) != v:
                raise LeverError(f"{self.name}: the launch plan lacks {k}={v}")
        for pid in target.pids:  # launched already: its environment must hold the values
            env = process_env(pid)
            wrong = {k: env.get(k) for k, v in want.items() if env.get(k) != v}
            if wrong:
                raise LeverError(f"{self.name}: pid {pid} runs with {wrong}, not {want}")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        for k, v in saved.get("env", {}).items():
            if v is None:
                target.env.pop(k, None)
            else:
                target.env[k] = v


class Tf32Override(EnvLever):
    """cuBLAS fp32 GEMMs on TF32 tensor cores, whatever the framework asked (PyTorch)."""

    name = "tf32_override"
    risk = Risk.NUMERICS
    causes = frozenset({"fp32_gemm"})
    variables = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",)

    def values(self) -> dict[str, str]:
        return {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}


class _AllocConf(EnvLever):
    """One PYTORCH_CUDA_ALLOC_CONF option (the variable holds one option per lever: they conflict)."""

    causes = frozenset({"allocator"})
    risk = Risk.MEMORY
    variables = ("PYTORCH_CUDA_ALLOC_CONF",)
    option: ClassVar[str]

    def values(self) -> dict[str, str]:
        return {"PYTORCH_CUDA_ALLOC_CONF": f"{self.option}:{self.setting_or_default('value')}"}


class AllocExpandableSegments(_AllocConf):
    """PyTorch's caching allocator maps its segments as expandable virtual memory: one segment grows
    instead of new ones being allocated (fewer cudaMalloc calls, less fragmentation)."""

    name = "alloc_expandable_segments"
    option = "expandable_segments"
    defaults = {"value": "True"}


class AllocGcThreshold(_AllocConf):
    """PyTorch's caching allocator reclaims unused cached blocks once the job's memory use passes
    this fraction, instead of freeing its whole cache (and synchronizing) when an allocation fails."""

    name = "alloc_gc_threshold"
    option = "garbage_collection_threshold"
    defaults = {"value": "0.8"}


class AllocMaxSplitSize(_AllocConf):
    """PyTorch's caching allocator does not split cached blocks larger than this many MB, so large
    blocks stay whole for large allocations (less fragmentation)."""

    name = "alloc_max_split_size"
    option = "max_split_size_mb"
    defaults = {"value": "256"}


class AllocKeepCache(EnvLever):
    """A job that empties PyTorch's allocator cache every step pays a cudaFree (which waits for
    the device) and a cudaMalloc each time: through gitmd's sitecustomize, torch.cuda.empty_cache()
    keeps the cache. The allocator still frees cached blocks itself before an allocation would pass
    the device's memory or the job's memory fraction; other processes on the GPU see the memory
    held, hence the memory risk."""

    name = "alloc_keep_cache"
    live_form = "alloc_keep_cache_live"
    causes = frozenset({"allocator"})
    risk = Risk.MEMORY
    variables = ("GITMD_KEEP_CACHE",)

    def values(self) -> dict[str, str]:
        return {"GITMD_KEEP_CACHE": "1"}


class CudaDeviceMaxConnections(EnvLever):
    """Hardware work queues per device (default 8): more lets independent streams overlap."""

    name = "cuda_device_max_connections"
    causes = frozenset({"launch_bound"})
    variables = ("CUDA_DEVICE_MAX_CONNECTIONS",)
    acts_through = ""
    defaults = {"value": 32}

    def values(self) -> dict[str, str]:
        return {"CUDA_DEVICE_MAX_CONNECTIONS": str(int(self.setting_or_default("value")))}


class CpuThreads(EnvLever):
    """OpenMP/MKL thread counts (oversubscribed host threads steal the launch thread's core)."""

    name = "cpu_threads"
    causes = frozenset({"host_contention", "launch_bound"})
    variables = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    acts_through = ""
    defaults = {"value": 4}

    def values(self) -> dict[str, str]:
        n = str(int(self.setting_or_default("value")))
        return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


class CudnnBenchmark(EnvLever):
    """cuDNN autotuning of convolution algorithms (PyTorch), through gitmd's sitecustomize. Another
    algorithm sums in another order (and may use TF32 tensor cores): numerics-changing."""

    name = "cudnn_benchmark"
    causes = frozenset({"conv_fp32"})
    risk = Risk.NUMERICS
    variables = ("GITMD_CUDNN_BENCHMARK",)

    def values(self) -> dict[str, str]:
        return {"GITMD_CUDNN_BENCHMARK": "1"}


class DataloaderPinMemory(EnvLever):
    """DataLoader batches in pinned memory (when the job did not choose), so their copies to the
    GPU run at pinned speed: the pageable copies attribution found."""

    name = "dataloader_pin_memory"
    causes = frozenset({"pageable_copy"})
    variables = ("GITMD_DATALOADER_PIN_MEMORY",)

    def values(self) -> dict[str, str]:
        return {"GITMD_DATALOADER_PIN_MEMORY": "1"}


class DataloaderWorkers(EnvLever):
    """DataLoader worker processes (when the job did not choose): loading off the launch thread."""

    name = "dataloader_workers"
    causes = frozenset({"launch_bound", "host_contention"})
    risk = Risk.MEMORY
    variables = ("GITMD_DATALOADER_WORKERS",)
    defaults = {"value": 4}

    def values(self) -> dict[str, str]:
        return {"GITMD_DATALOADER_WORKERS": str(int(self.setting_or_default("value")))}
