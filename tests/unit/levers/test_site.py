"""gitmd's sitecustomize (framework knobs) in a real interpreter: it never changes a job that does
not ask or does not use the framework, it still imports the job's own sitecustomize, and it adjusts
a framework module only when the job imports it. (The H200 run checks it against real PyTorch.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitmd.levers.launch_env import SITE_DIR, job_environment, with_site


def py(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("GITMD_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=cwd)


def test_the_plan_names_the_site_only_for_framework_knobs() -> None:
    assert "GITM_SITE" not in with_site({"OMP_NUM_THREADS": "4"})
    env = with_site({"GITMD_CUDNN_BENCHMARK": "1"})
    assert env["GITM_SITE"] == str(SITE_DIR) and (SITE_DIR / "sitecustomize.py").is_file()
    knob = {"GITMD_CUDNN_BENCHMARK": "1"}
    assert job_environment({}, knob)["PYTHONPATH"] == str(SITE_DIR)
    assert job_environment({"PYTHONPATH": "/opt/lib"}, knob)["PYTHONPATH"] == f"{SITE_DIR}:/opt/lib"
    assert job_environment({"PYTHONPATH": "/opt/lib"}, {"OMP_NUM_THREADS": "4"})["PYTHONPATH"] == "/opt/lib"


def test_a_job_without_the_framework_runs_unchanged_and_its_own_sitecustomize_still_loads(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['JOB_SITE'] = 'loaded'\n")
    env = {
        "GITMD_CUDNN_BENCHMARK": "1",
        "GITMD_DATALOADER_PIN_MEMORY": "1",
        "PYTHONPATH": f"{SITE_DIR}:{own}",
    }
    r = py(
        "import os, sys; print(os.environ.get('JOB_SITE'), 'torch' in sys.modules); sys.exit(7)",
        env,
        tmp_path,
    )
    assert r.returncode == 7 and r.stdout.split() == ["loaded", "False"] and r.stderr == ""


def fake_torch(top: Path) -> Path:
    """A package named torch under ``top``/fw with the attributes the knobs touch (PyTorch itself:
    on the H200, tests/gpu/test_site_report.py); the folder to put on PYTHONPATH."""
    pkg = top / "fw" / "torch"
    (pkg / "utils" / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        # cudnn as PyTorch has it: an instance of a module class whose flags are data descriptors
        "class _Prop:\n    v = False\n    def __get__(self, obj, cls=None): return _Prop.v\n"
        "    def __set__(self, obj, value): _Prop.v = bool(value)\n"
        "class _CudnnModule: benchmark = _Prop()\nclass backends: cudnn = _CudnnModule()\n"
        "class cuda:\n    emptied = 0\n    @staticmethod\n    def is_available(): return True\n"
        "    @staticmethod\n    def empty_cache(): cuda.emptied += 1\n"
    )
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "utils" / "data" / "__init__.py").write_text(
        "class DataLoader:\n    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None,\n"
        "                 batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False):\n"
        "        self.pin_memory, self.num_workers = pin_memory, num_workers\n"
    )
    return top / "fw"


def test_the_framework_is_adjusted_when_the_job_imports_it(tmp_path: Path) -> None:
    pkg = fake_torch(tmp_path) / "torch"
    code = (
        "import torch, torch.utils.data as d\n"
        "torch.cuda.empty_cache()\n"
        "print(torch.backends.cudnn.benchmark, d.DataLoader([]).pin_memory, d.DataLoader([]).num_workers,"
        " d.DataLoader([], pin_memory=False).pin_memory, d.DataLoader([], num_workers=1).num_workers,"
        " torch.cuda.emptied)"
    )
    base = {"PYTHONPATH": f"{SITE_DIR}:{tmp_path / 'fw'}"}
    r = py(code, base, tmp_path)
    assert r.stdout.split() == ["False", "False", "0", "False", "1", "1"], r.stderr  # nothing asked
    knobs = {
        "GITMD_CUDNN_BENCHMARK": "1",
        "GITMD_DATALOADER_PIN_MEMORY": "1",
        "GITMD_DATALOADER_WORKERS": "3",
        "GITMD_KEEP_CACHE": "1",
    }
    r = py(code, {**base, **knobs}, tmp_path)
    # the job's own choices stand; empty_cache kept the cache
    assert r.stdout.split() == ["True", "True", "3", "False", "1", "0"], r.stderr
    # a framework that is different (no backends, no DataLoader) is left alone, the job runs
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "utils" / "data" / "__init__.py").write_text("")
    r = py("import torch; print(torch.x)", {**base, **knobs}, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "1" and r.stderr == ""


def test_the_site_reports_what_it_changed_to_the_launchers_file(tmp_path: Path) -> None:
    """GITMD_SITE_REPORT (the file `gitmctl run` makes): "site" once PyTorch is imported and the knobs
    are in place, and a knob's variable once that knob changed something. A job that builds no
    DataLoader and never empties the cache reports the site alone; the job's own choices are no
    change either; a process that never imports PyTorch says nothing."""
    fake_torch(tmp_path)
    knobs = {"GITMD_DATALOADER_WORKERS": "4", "GITMD_KEEP_CACHE": "1"}

    def report(code: str) -> list[str]:
        path = tmp_path / "report.txt"
        path.write_text("")
        env = {"PYTHONPATH": f"{SITE_DIR}:{tmp_path / 'fw'}", "GITMD_SITE_REPORT": str(path), **knobs}
        r = py(code, env, tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return path.read_text().splitlines()

    assert report("import json") == []  # no PyTorch: nothing for the knobs to act on, nothing said
    assert report("import torch") == ["site"]  # PyTorch adjusted, nothing reached
    assert report("import torch.utils.data as d; d.DataLoader([], num_workers=2)") == ["site"]  # its choice
    got = report(
        "import torch, torch.utils.data as d\nfor _ in range(3): d.DataLoader([]); torch.cuda.empty_cache()"
    )
    assert got == ["site", "GITMD_DATALOADER_WORKERS", "GITMD_KEEP_CACHE"]  # once each
    # a report file that cannot be written changes nothing in the job
    env = {
        "PYTHONPATH": f"{SITE_DIR}:{tmp_path / 'fw'}",
        "GITMD_SITE_REPORT": str(tmp_path / "no/such"),
        **knobs,
    }
    r = py("import torch.utils.data as d; print(d.DataLoader([]).num_workers)", env, tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "4" and r.stderr == ""


def test_cudnn_autotuning_is_said_to_have_acted_only_where_the_job_left_it_alone(tmp_path: Path) -> None:
    """GITMD_CUDNN_BENCHMARK: the autotuner is on from PyTorch's import, and the knob is said to have
    changed something at the process's exit, only if the job never set the flag itself (a job that
    sets it, to True or to False, decides; gitmd's setting was then no change)."""
    fake_torch(tmp_path)
    path = tmp_path / "report.txt"

    def run(code: str) -> tuple[str, list[str]]:
        path.write_text("")
        env = {
            "PYTHONPATH": f"{SITE_DIR}:{tmp_path / 'fw'}",
            "GITMD_SITE_REPORT": str(path),
            "GITMD_CUDNN_BENCHMARK": "1",
        }
        r = py(code, env, tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return r.stdout.strip(), path.read_text().splitlines()

    show = "import torch; print(torch.backends.cudnn.benchmark)"
    assert run(show) == ("True", ["site", "GITMD_CUDNN_BENCHMARK"])  # left alone: gitmd's setting ran
    own = "import torch\ntorch.backends.cudnn.benchmark = True\nprint(torch.backends.cudnn.benchmark)"
    assert run(own) == ("True", ["site"])  # its own choice: the knob changed nothing
    off = "import torch\ntorch.backends.cudnn.benchmark = False\nprint(torch.backends.cudnn.benchmark)"
    assert run(off) == ("False", ["site"])  # its choice stands
    assert run("import json; print(1)") == ("1", [])  # no PyTorch: nothing set, nothing said


def test_the_free_guard_goes_first_on_ld_preload() -> None:
    plan = {"GITM_GUARD": "/usr/lib/gitmd/libgitm_guard.so"}
    assert job_environment({}, plan)["LD_PRELOAD"] == "/usr/lib/gitmd/libgitm_guard.so"
    both = job_environment({"LD_PRELOAD": "/opt/libjemalloc.so"}, plan)["LD_PRELOAD"]
    assert both == "/usr/lib/gitmd/libgitm_guard.so:/opt/libjemalloc.so"
    assert "LD_PRELOAD" not in job_environment({}, {"GITM_JOB_ID": "x"})


FAKE_SHIM = """
#include <stdint.h>
static uint64_t flags[4];
uint64_t gitm_shim_flag(uint32_t f) { return f < 4 ? flags[f] : 0; }
void fake_set(uint32_t f, uint64_t v) { flags[f] = v; }
"""


def test_live_flags_switch_the_hook_while_the_job_runs(tmp_path: Path) -> None:
    """GITMD_LIVE_FLAGS=1: torch.cuda.empty_cache() asks the shim in the process (here a library
    exporting gitm_shim_flag as the shim does, loaded the way the driver loads the shim) for the
    keep-cache flag at every call: set, the cache is kept; cleared, it is handed back again. Before
    the shim is loaded, and with no shim at all, the job's calls go through unchanged."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    (tmp_path / "fake.c").write_text(FAKE_SHIM)
    lib = tmp_path / "libfake_shim.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True)
    pkg = tmp_path / "fw" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "class cuda:\n    emptied = 0\n    @staticmethod\n    def empty_cache(): cuda.emptied += 1\n"
    )
    code = (
        "import ctypes, sys, torch\n"
        "n = []\n"
        "def call():\n    torch.cuda.empty_cache(); n.append(torch.cuda.emptied)\n"
        "call()\n"  # the shim not loaded yet (CUDA not initialised): handed back
        "shim = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"  # as the driver loads it
        "call()\n"
        "shim.fake_set(1, 1); call(); call()\n"  # the daemon set the flag: kept
        "shim.fake_set(1, 0); call()\n"  # cleared (reverted): handed back again
        "print(*n)\n"
    )
    base = {"PYTHONPATH": f"{SITE_DIR}:{tmp_path / 'fw'}", "GITMD_LIVE_FLAGS": "1"}
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GITMD_")}
    env = {**clean, **base, "CUDA_INJECTION64_PATH": str(lib)}
    r = subprocess.run(
        [sys.executable, "-c", code, str(lib)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert r.returncode == 0 and r.stdout.split() == ["1", "2", "2", "2", "3"], r.stderr
    # no shim where the plan said (the job runs without capture): every call goes through
    gone = {**base, "CUDA_INJECTION64_PATH": str(tmp_path / "missing.so")}
    r = py(
        "import torch\nfor _ in range(3): torch.cuda.empty_cache()\nprint(torch.cuda.emptied)", gone, tmp_path
    )
    assert r.returncode == 0 and r.stdout.strip() == "3" and r.stderr == ""


def test_a_run_is_untouched_only_when_every_variable_is_a_site_knob_that_did_nothing() -> None:
    from gitmd.levers.launch_env import SiteReport, untouched

    knob = {"GITMD_DATALOADER_WORKERS": "4", "GITM_SITE": str(SITE_DIR)}
    assert "GITMD_DATALOADER_WORKERS changed nothing" in untouched(knob, SiteReport(True, ()))
    assert untouched(knob, SiteReport(True, ("GITMD_DATALOADER_WORKERS",))) == ""  # it acted
    assert untouched(knob, SiteReport(False, ())) == ""  # the site never loaded: unknown
    assert untouched(knob, None) == ""  # no report: unknown
    # a variable a library reads (PyTorch, the driver) may act with no word from the site
    assert untouched({**knob, "OMP_NUM_THREADS": "4"}, SiteReport(True, ())) == ""
    assert untouched({"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, SiteReport(True, ())) == ""
    with pytest.raises(ValueError):
        SiteReport(True, ("PATH",))
    with pytest.raises(ValueError):
        SiteReport(True, tuple(f"GITMD_K{i}" for i in range(17)))


def test_every_knob_the_trials_read_reports_and_no_other() -> None:
    """untouched() trusts only SITE_REPORTED knobs: each must be one whose hook reports it."""
    import re

    from gitmd.levers.launch_env import SITE_REPORTED

    said = set(re.findall(r'_report\("(GITMD_[A-Z_]+)"\)', (SITE_DIR / "sitecustomize.py").read_text()))
    assert said == set(SITE_REPORTED)
