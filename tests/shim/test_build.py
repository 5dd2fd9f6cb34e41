"""The shim builds; its C ring tests pass; without a CUDA toolkit it says so and builds nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gitmd.capture import abi
from gitmd.capture.ring import Ring, RingStatus
from tests.conftest import ROOT


def test_ring_c_tests_pass(shim_tools: Path) -> None:
    r = subprocess.run([str(shim_tools / "test_ring")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "6 passed, 0 failed"


def test_detach_rule_c_tests_pass(shim_tools: Path) -> None:
    """A window detaches CUPTI only in a settled process (src/detach_rule.h): 10 s old and quiet, or
    60 s old whatever it saw."""
    r = subprocess.run([str(shim_tools / "test_detach_rule")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "detach rule: ok"


def test_free_guard_c_tests_pass(shim_tools: Path) -> None:
    """Preloaded, the guard releases a guarded range before free, realloc, reallocarray, munmap,
    mremap, madvise(DONTNEED) or mmap(MAP_FIXED) gives its pages back, and on nothing else."""
    guard = shim_tools / "libgitm_guard.so"
    r = subprocess.run(
        [str(shim_tools / "test_guard")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"LD_PRELOAD": str(guard), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "guard: all checks passed" in r.stdout


def test_free_guard_is_inert_in_ordinary_programs(shim_tools: Path) -> None:
    """Preloaded into a Python process that allocates and frees a lot, with nothing guarded: the
    same output, and the guard exports only its own table and the interposed calls."""
    code = "import numpy as np; a = [np.ones(1 << k) for k in range(24)]; print(sum(x.sum() for x in a))"
    plain = subprocess.run(["python3", "-c", code], capture_output=True, text=True, timeout=120)
    guarded = subprocess.run(
        ["python3", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LD_PRELOAD": str(shim_tools / "libgitm_guard.so")},
    )
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout == plain.stdout
    if shutil.which("nm"):
        syms = subprocess.run(
            ["nm", "-D", "--defined-only", str(shim_tools / "libgitm_guard.so")],
            capture_output=True,
            text=True,
            check=True,
        )
        exported = {line.split()[-1] for line in syms.stdout.splitlines() if " T " in line}
        assert exported == {
            "gitm_guard_add",
            "gitm_guard_remove",
            "gitm_guard_holds",
            "gitm_guard_released",
            "free",
            "realloc",
            "reallocarray",
            "munmap",
            "mremap",
            "madvise",
            "mmap",
            "mmap64",
            "gitm_guard_cupti_owner",
            "gitm_guard_app_cupti",
            "gitm_guard_app_kinds",
            "gitm_guard_cupti_slot",
            "gitm_guard_app_completed",
            "cuptiSubscribe",
            "cuptiUnsubscribe",
            "cuptiActivityEnable",
            "cuptiActivityDisable",
            "cuptiActivityEnableContext",
            "cuptiActivityDisableContext",
            "cuptiActivityRegisterCallbacks",
            "cuptiFinalize",
        }


def test_free_guard_sees_the_jobs_own_cupti_use_and_keeps_its_callbacks(shim_tools: Path) -> None:
    """Against a fake libcupti opened RTLD_LOCAL (as torch's extension and the shim open theirs):
    every call forwarded with its result; the job's calls told from the shim's; after the shim's
    window or cuptiFinalize replaced them, the job's buffer callbacks are back before its next
    enable (a profiler's trace never goes to the shim)."""
    r = subprocess.run(
        [str(shim_tools / "test_cupti_guard"), str(shim_tools / "fake")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"LD_PRELOAD": str(shim_tools / "libgitm_guard.so"), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cupti guard: all checks passed" in r.stdout


def test_cffi_layout_matches_the_c_compiler(shim_tools: Path) -> None:
    c = json.loads(
        subprocess.run([str(shim_tools / "abi_offsets")], capture_output=True, text=True, check=True).stdout
    )
    a = abi.load()
    assert c["sizeof gitm_ring_header"] == a.header.itemsize
    assert c["sizeof gitm_control"] == a.control.itemsize
    assert c["sizeof gitm_record"] == a.record.itemsize == 64
    for key, offset in c.items():
        if "." not in key:
            continue
        struct, fld = key.split(".")
        if struct == "gitm_ring_header":
            assert a.header.fields[fld][1] == offset, key
        elif struct == "gitm_control":
            assert a.control.fields[fld][1] == offset, key
        elif struct == "gitm_record":
            assert a.record.fields[fld][1] == offset, key
        else:
            payload = a.dtype(f"struct {struct}")
            assert payload.fields[fld][1] == offset, key


def test_no_toolkit_means_a_clear_message_and_no_shim(tmp_path: Path) -> None:
    r = subprocess.run(
        ["make", "-C", str(ROOT / "shim"), "shim", "CUDA_HOME=/nonexistent", f"BUILD={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0
    assert "CUPTI not found" in r.stdout and "runs without capture" in r.stdout
    assert not (tmp_path / "libgitm_shim.so").exists()


@pytest.mark.skipif(not shutil.which("nm"), reason="nm is not installed")
def test_shim_exports_only_the_injection_entry_point_and_its_flags() -> None:
    lib = ROOT / "shim" / "build" / "libgitm_shim.so"
    if not lib.exists():
        pytest.skip("the shim was not built here (no CUDA toolkit with CUPTI)")
    syms = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    )
    exported = {line.split()[-1] for line in syms.stdout.splitlines() if " T " in line}
    assert exported == {"InitializeInjection", "gitm_shim_flag"}


def test_the_shims_flags_read_zero_until_the_daemon_sets_them() -> None:
    """gitm_shim_flag, what gitmd's sitecustomize calls in the job's process: safe before the shim
    was initialised (loaded, never injected: the state of a process whose CUDA is not up yet), 0 for
    every flag, known or not."""
    lib = ROOT / "shim" / "build" / "libgitm_shim.so"
    if not lib.exists():
        pytest.skip("the shim was not built here (no CUDA toolkit with CUPTI)")
    code = (
        "import ctypes, sys\n"
        "f = ctypes.CDLL(sys.argv[1]).gitm_shim_flag\n"
        "f.restype, f.argtypes = ctypes.c_uint64, [ctypes.c_uint32]\n"
        "print([f(i) for i in (0, 1, 2, 3, 4, 1 << 31)])\n"
    )
    r = subprocess.run(["python3", "-c", code, str(lib)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[0, 0, 0, 0, 0, 0]", r.stderr


def _injected(tmp_path: Path, **env: str) -> tuple[RingStatus, str]:
    """The shim loaded into a fresh process and its InitializeInjection called as the CUDA driver
    calls it (no GPU needed for what is asked here): its ring's status, and its stderr."""
    import sys

    lib = ROOT / "shim" / "build" / "libgitm_shim.so"
    if not lib.exists():
        pytest.skip("the shim was not built here (no CUDA toolkit with CUPTI headers)")
    code = "import ctypes, sys\nprint(ctypes.CDLL(sys.argv[1]).InitializeInjection())\n"
    r = subprocess.run(
        [sys.executable, "-c", code, str(lib)],
        env={"PATH": "/usr/bin:/bin", "GITM_JOB_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stdout + r.stderr  # never stops the job
    rings = list(tmp_path.glob("ring-*.gitm"))
    assert len(rings) == 1, rings
    ring = Ring(rings[0])
    try:
        return ring.status(), r.stderr
    finally:
        ring.close()


def test_the_shim_links_no_cupti_and_says_why_it_is_off_without_one(tmp_path: Path) -> None:
    """Hardening issue, item 13: the shim linked libcupti.so.13 with an rpath to the build host's
    CUDA, so a package built on one host failed to load wherever CUDA lives elsewhere. It opens
    libcupti at run time now: capture.cupti_path (GITM_CUPTI_PATH) when set, else the dynamic
    linker's search and the usual places of a CUDA toolkit; when none will do, the job runs on and
    the ring says why capture is off."""
    if shutil.which("readelf"):
        lib = ROOT / "shim" / "build" / "libgitm_shim.so"
        if lib.exists():
            out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
            dyn = out.stdout
            assert "libcupti" not in dyn and "RPATH" not in dyn and "RUNPATH" not in dyn, dyn
    st, err = _injected(tmp_path, GITM_CUPTI_PATH="/nonexistent/libcupti.so.13")
    assert st.status == "off", st
    assert "not found" in st.reason and "/nonexistent/libcupti.so.13" in st.reason
    assert "GITM_CUPTI_PATH" in st.reason
    assert "gitm shim: capture off" in err


def test_a_libcupti_without_the_shims_functions_is_refused(tmp_path: Path, shim_tools: Path) -> None:
    """A library by that name that is not the CUPTI the shim was built for (here the guard tests'
    fake libcupti, which has a handful of its functions) switches capture off, naming the missing
    function; the job runs on."""
    fake = shim_tools / "fake" / "libcupti.so.99"
    st, _ = _injected(tmp_path, GITM_CUPTI_PATH=str(fake))
    assert st.status == "off" and "has no cupti" in st.reason, st


def test_the_shim_finds_the_toolkits_cupti_by_itself(tmp_path: Path) -> None:
    """With no path given, a CUPTI the dynamic linker or a toolkit under /usr/local/cuda has is
    found and opened (here without a GPU: the shim may still switch off later, for another reason)."""
    import ctypes.util

    usual = list(Path("/usr/local/cuda").glob("**/libcupti.so.*")) if Path("/usr/local/cuda").exists() else []
    if not usual and not ctypes.util.find_library("cupti"):
        pytest.skip("no libcupti on this host")
    st, _ = _injected(tmp_path)
    assert "not found" not in st.reason and "has no" not in st.reason, st


def test_with_the_free_guard_preloaded_the_shims_cupti_calls_still_go_through_it(tmp_path: Path) -> None:
    """The guard tells the shim's CUPTI calls from the job's by their return address; it saw them
    when the shim linked libcupti, and must still now that the shim opens it at run time (each
    function is asked of the global scope first): the shim's buffer-callback registration is seen
    by the guard as the shim's, and forwarded to the real libcupti."""
    import ctypes.util

    usual = list(Path("/usr/local/cuda").glob("**/libcupti.so.*")) if Path("/usr/local/cuda").exists() else []
    guard = ROOT / "shim" / "build" / "libgitm_guard.so"
    if not usual and not ctypes.util.find_library("cupti"):
        pytest.skip("no libcupti on this host")
    if not guard.exists():
        pytest.skip("the guard was not built")
    st, err = _injected(tmp_path, LD_PRELOAD=str(guard), GITM_GUARD_TRACE="1")
    seen = [ln for ln in err.splitlines() if ln.startswith("gitm-guard: cuptiActivityRegisterCallbacks")]
    assert seen and " by shim -> " in seen[0] and "libcupti.so" in seen[0], err
    assert "not found" not in st.reason and "has no" not in st.reason, st
