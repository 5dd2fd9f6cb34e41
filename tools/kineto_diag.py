"""Diagnose a self-profiling job under the shim and the free guard (GPU host, no gitmd needed).

Runs tests/gpu/programs/torch_profiled.py four ways — plain, guard only, shim only, guard and shim
(no window is ever opened: no daemon) — and prints, for each, the kernels the job's own profile
kept, every CUPTI call the guard saw (GITM_GUARD_TRACE), the libcupti copies mapped in the process
and the shim's ring status.  python tools/kineto_diag.py"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests/gpu/programs/torch_profiled.py"
SHIM = ROOT / "shim/build/libgitm_shim.so"
GUARD = ROOT / "shim/build/libgitm_guard.so"
WRAP = (
    "import runpy, sys\n"
    "sys.argv = [sys.argv[1]] + sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'cupti' in l or 'gitm' in l})\n"
    "print('mapped', *libs, sep='\\n  ', flush=True)\n"
)


def ring_status(job_dir: Path) -> str:
    from gitmd.capture.ring import Ring, RingError

    out = []
    for f in sorted(job_dir.glob("ring-*.gitm")):
        try:
            r = Ring(f)
            st = r.status()
            out.append(f"{f.name}: {st.status} {st.reason!r} windows {st.windows_opened}")
            r.close()
        except (RingError, KeyError, ValueError) as e:
            out.append(f"{f.name}: {e}")
    return "; ".join(out) or "(no ring)"


def main() -> int:
    configs = {
        "plain": {},
        "guard": {"LD_PRELOAD": str(GUARD)},
        "shim": {"CUDA_INJECTION64_PATH": str(SHIM)},
        "guard+shim": {
            "LD_PRELOAD": str(GUARD),
            "GITM_GUARD": str(GUARD),
            "CUDA_INJECTION64_PATH": str(SHIM),
        },
    }
    for name, extra in configs.items():
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            (t / "go").touch()
            (t / "end").touch()
            job_dir = t / "job"
            job_dir.mkdir()
            env = {
                **os.environ,
                **extra,
                "GITM_GUARD_TRACE": "1",
                "GITM_JOB_DIR": str(job_dir),
                "GITM_JOB_ID": "diag",
            }
            argv = [sys.executable, "-c", WRAP, str(PROGRAM), str(t / "go"), str(t / "end")]
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            print(f"== {name}: rc {p.returncode}")
            print("\n".join(line for line in p.stdout.splitlines() if line != "ready"))
            guard_lines = [line for line in p.stderr.splitlines() if line.startswith("gitm")]
            print("\n".join(guard_lines[:40]) or "(no guard lines)")
            if p.returncode:
                print(p.stderr[-2000:])
            print("ring:", ring_status(job_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
