"""The catalog in words (ListLevers): every lever, the causes of the attribution's table that select
it, when it acts, and the environment and defaults its default setting has."""

from __future__ import annotations

from gitmd.analysis.causes import LEVERS
from gitmd.levers import describe
from gitmd.levers.host import SchedPriority
from gitmd.levers.launch_env import SITE_DIR, AllocGcThreshold, CpuThreads, CudaDeviceMaxConnections
from gitmd.levers.registry import CATALOG
from gitmd.levers.shim_knobs import UINT64, CotenantYield, MempoolRelease, StreamPriority, SyncSpin


def test_every_lever_of_the_catalog_in_its_order_with_words() -> None:
    infos = describe.catalog()
    assert [i.name for i in infos] == list(CATALOG)
    for i in infos:
        assert i.summary and i.changes, i.name  # every lever says what it does and what it changes
        assert i.kind in ("launch", "live-host", "live-shim", "device")
        assert i.risk in ("safe", "numerics-changing", "memory-risk")
        assert i.launch != i.live  # a lever acts at launch or on the running job
        assert i.launch == (i.kind == "launch") and bool(i.env) == i.launch


def test_causes_come_from_the_attribution_table() -> None:
    for i in describe.catalog():
        assert set(i.causes) == {c for c, levers in LEVERS.items() if i.name in levers}, i.name
    assert describe.describe(CATALOG["cpu_affinity"]).causes == (
        "host_contention",
        "launch_bound",
        "sync_stall",
    )
    assert describe.describe(CATALOG["tf32_override"]).causes == ("fp32_gemm",)
    table = {"a": ("x", "y"), "b": ("y",), "c": ()}
    assert describe.selecting_causes("y", table) == ("a", "b")
    assert describe.selecting_causes("z", table) == ()


def test_a_launch_lever_carries_its_default_environment() -> None:
    i = describe.describe(CATALOG["cpu_threads"])
    assert (i.kind, i.risk, i.launch, i.live) == ("launch", "safe", True, False)
    assert dict(i.env) == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    assert i.variables == ("OMP_NUM_THREADS", "MKL_NUM_THREADS") and dict(i.defaults) == {"value": 4}
    assert "OMP_NUM_THREADS, MKL_NUM_THREADS" in i.changes and "sitecustomize" not in i.changes
    tf32 = describe.describe(CATALOG["tf32_override"])
    assert tf32.risk == "numerics-changing" and dict(tf32.env) == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    alloc = describe.describe(CATALOG["alloc_gc_threshold"])
    assert dict(alloc.env) == {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.8"}
    # a framework knob: the environment names gitmd's site directory, as a launch plan does
    keep = describe.describe(CATALOG["alloc_keep_cache"])
    assert dict(keep.env) == {"GITMD_KEEP_CACHE": "1", "GITM_SITE": str(SITE_DIR)}
    assert keep.variables == ("GITMD_KEEP_CACHE",) and "sitecustomize" in keep.changes


def test_live_and_device_levers_say_what_they_change() -> None:
    aff = describe.describe(CATALOG["cpu_affinity"])
    assert (aff.kind, aff.launch, aff.live, aff.host_only) == ("live-host", False, True, True)
    assert "CPUs of every thread" in aff.changes and dict(aff.env) == {} and dict(aff.defaults) == {}
    nice = describe.describe(CATALOG["sched_priority"])
    assert dict(nice.defaults) == {"nice": -5} and "nice value" in nice.changes
    spin = describe.describe(CATALOG["sync_spin"])
    assert "GITM_KNOB_CTX_SCHED" in spin.changes and dict(spin.defaults) == {"sched": SyncSpin.SPIN}
    power = describe.describe(CATALOG["power_limit"])
    assert power.kind == "device" and power.live and "power limit" in power.changes
    assert "allow_device_levers" in power.changes and power.causes == ("throttling", "power_cap")


def test_a_change_made_at_launch_and_live_names_its_counterpart() -> None:
    assert describe.describe(CATALOG["alloc_keep_cache"]).counterpart == "alloc_keep_cache_live"
    assert describe.describe(CATALOG["alloc_keep_cache_live"]).counterpart == "alloc_keep_cache"
    assert describe.describe(CATALOG["cpu_threads"]).counterpart == ""


def test_defaults_are_the_values_the_levers_use() -> None:
    """The table ListLevers shows is the one the levers read: a setting without a value gets it."""
    assert CpuThreads().values() == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    assert CpuThreads(value=8).values() == {"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}
    assert CudaDeviceMaxConnections().values() == {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    assert AllocGcThreshold(value="0.6").values() == {
        "PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"
    }
    assert SchedPriority().wanted() == -5 and SchedPriority(nice=3).wanted() == 3
    assert StreamPriority().setting_or_default("priority") == -5
    assert MempoolRelease(pid=1)._want() == UINT64 and SyncSpin(pid=1, sched=4)._want() == 4
    assert CotenantYield(pids=[2])._share() == 750 and CotenantYield(pids=[2])._period() == 100
    assert CpuThreads().setting == {}  # the setting itself stays as given (it is what is stored)
