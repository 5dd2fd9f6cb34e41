#!/usr/bin/env python3
"""Capture windows cycled fast on a multi-threaded launch-bound job, without the daemon: the shim
driven straight through its ring's control page, as gitmd drives it, in several shim configurations
side by side, counting the runs that do not end as their plain run does.

Written after the H200 (2026-12-03) showed `malloc(): unsorted double linked list corrupted` (SIGABRT)
in a four-thread launch loop under gitmd's window cycling, and once before in the scoreboard's
contended part. Each mode is a way of closing a window (detach with cuptiFinalize at the next driver
API exit, or cuptiActivityDisable only), with or without the free guard preloaded, with all window
kinds or kernel activity only; a mode whose runs crash names the part at fault.

    python3 bench/window_stress.py --runs 6 --modes detach,disable,detach-noguard,detach-kernel \
        [--program threads|launch|cupy] [--json OUT] [--steps 30000] [--threads 4] [--open-s 0.1] \
        [--every-s 0.3] [--backtrace]

--program: the four-thread torch loop (default), the one-thread torch launch loop, or CuPy's FFT
loop (no torch).

--hogs N --cores 2,3: the job and N busy processes share those cores (tests/gpu/test_experiments.py's
contended job). Each run also counts the kernel records every window delivered: on the H200
(2026-12-04, a732f22) that job's windows 3-9 under gitmd held none while it launched ~26,000
kernels a second; "empty" counts such windows (a window before the program's first kernel is not
counted). GITM_SHIM_DEBUG=1 in the environment puts the shim's own lines on the run's stderr (kept
with --keep-stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.capture.ring import Ring, RingError  # noqa: E402
from gitmd.capture.windows import KIND_BITS  # noqa: E402
from gitmd.config import CAPTURE_KINDS  # noqa: E402

SHIM = ROOT / "shim" / "build" / "libgitm_shim.so"
GUARD = ROOT / "shim" / "build" / "libgitm_guard.so"
W = ROOT / "bench" / "workloads"
# --program: what runs under the cycling windows (each prints a result line; step times are dropped)
PROGRAMS = {
    "threads": lambda steps, threads: [
        str(ROOT / "tests" / "gpu" / "programs" / "threads_launch.py"),
        str(steps),
        str(threads),
    ],
    "launch": lambda steps, threads: [str(W / "launch_bound.py"), "--steps", str(steps)],
    "cupy": lambda steps, threads: [str(W / "cupy_fft.py"), "--n", "4096", "--steps", str(steps)],
    # a third-party program (bench/corpus, materialised): timm's training benchmark, whose backward
    # runs on the autograd engine's own thread
    "timm-train": lambda steps, threads: [
        "benchmark.py",
        "--bench",
        "train",
        "--model",
        "resnet18",
        "--batch-size",
        "64",
        "--use-train-size",
        "--num-warm-iter",
        "20",
        "--num-bench-iter",
        str(steps),
        "--precision",
        "float32",
        "--no-retry",
    ],
}
CWD = {"timm-train": ROOT / "bench" / "corpus" / "src" / "huggingface+pytorch-image-models"}
ALL = sum(KIND_BITS[k] for k in CAPTURE_KINDS)
# mode -> (GITM_SHIM_DETACH, guard preloaded, window kinds, first window only after --settle-s)
# "detach*": the shim's old cycle (cuptiFinalize after each quiet window, attached again at the next;
# GITM_SHIM_DETACH=every, kept for this comparison); "once": capture.detach_cupti — windows close
# disable-only and, --detach-after-s into the run, the harness ends the process's observation as
# gitmd does (GITM_KNOB_DETACH): one detach, every later window refused; "disable": never detached,
# the default since 2026-12-03.
MODES = {
    "detach": ("every", True, ALL, False),
    "once": ("1", True, ALL, False),
    "disable": ("0", True, ALL, False),
    "detach-noguard": ("every", False, ALL, False),
    "detach-kernel": ("every", True, KIND_BITS["kernel"], False),
    "disable-kernel": ("0", True, KIND_BITS["kernel"], False),
    "detach-settled": ("every", True, ALL, True),
}


def result(out: str) -> str:
    lines = [x for x in out.splitlines() if x.startswith("result ")]
    return re.sub(r" step_ms=\S+", "", lines[-1]) if lines else ""  # its timing may change, nothing else


def count_kernels(rows: Any, abi: Any, per_window: dict[int, int], current: int | None) -> int | None:
    """Add the kernel records of ``rows`` (drained, in ring order) to the window they came in, by the
    window markers among them (open: flags 1, close: 2; the window's id in correlation_id); returns
    the window still open after them (None: none). A window opened but holding no kernel counts 0."""
    kernel, marker = abi.const("GITM_REC_KERNEL"), abi.const("GITM_REC_WINDOW")
    types = rows["type"]
    prev = 0
    for i in [*map(int, (types == marker).nonzero()[0]), len(rows)]:
        if current is not None:
            per_window[current] = per_window.get(current, 0) + int((types[prev:i] == kernel).sum())
        if i < len(rows):
            wid = int(rows["correlation_id"][i])
            current = wid if int(rows["flags"][i]) == 1 else None
            if current is not None:
                per_window.setdefault(current, 0)
        prev = i + 1
    return current


def one_run(
    mode: str,
    argv: list[str],
    open_s: float,
    every_s: float,
    tmp: Path,
    gdb: bool = False,
    settle_s: float = 0.0,
    preload: str = "",
    cwd: Path | None = None,
    detach_after_s: float = 12.0,
    cores: set[int] | None = None,
    keep_stderr: bool = False,
) -> dict[str, object]:
    detach, guard, mask, settles = MODES[mode]
    d = Path(tempfile.mkdtemp(dir=tmp))
    env = {
        **os.environ,
        "GITM_JOB_DIR": str(d),
        "CUDA_INJECTION64_PATH": str(SHIM),
        "GITM_SHIM_DETACH": detach,
        "PYTHONFAULTHANDLER": "1",
    }
    preloads = [str(GUARD)] if guard else []
    if preload:
        preloads.append(preload)
    if preloads:
        env["LD_PRELOAD"] = ":".join(preloads)
    t0 = time.monotonic()
    if gdb:  # the environment reaches the program, not gdb's own start
        moved = ("LD_PRELOAD", "CUDA_INJECTION64_PATH")
        env_args = [f"-ex=set environment {k}={env[k]}" for k in moved if k in env]
        argv = [
            "gdb", "-q", "-batch", "-return-child-result", *env_args, "-ex=set pagination off",
            "-ex=handle SIGPIPE nostop noprint", "-ex=run", "-ex=thread apply all bt 25", "--args", *argv,
        ]  # fmt: skip
        env = {k: v for k, v in env.items() if k not in moved}
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    # stderr to a file: a pipe read only at the end fills with the shim's debug lines and blocks its
    # threads (and CUPTI's) in write(2), which would make the very empty windows counted here
    err_file = tempfile.TemporaryFile(mode="w+", dir=tmp)  # noqa: SIM115 - read after the run
    p = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=err_file, text=True, cwd=cwd, preexec_fn=pin
    )
    # kernel records each opened window delivered, by the ring's window markers (a forced flush at a
    # close can be drained after the next open); after a close marker, none counts until the next open
    per_window: dict[int, int] = {}
    current: int | None = None
    detach_op = 0
    detach_answers: list[list[int]] = []
    rings: dict[Path, Ring] = {}
    windows = acked = 0
    seq_by_ring: dict[Path, int] = {}
    wid = 0
    next_at = time.monotonic() + (settle_s if settles else every_s)
    is_open = False
    while p.poll() is None:
        for path in d.glob("ring-*.gitm"):
            if path not in rings:
                try:
                    rings[path] = Ring(path)
                except RingError:
                    pass
        now = time.monotonic()
        if mode == "once" and not is_open and rings and now - t0 >= detach_after_s and not detach_answers:
            for r in rings.values():  # the end of the process's observation, as gitmd ends it
                detach_op = detach_op or r.abi.const("GITM_KNOB_DETACH")
                try:
                    rc, out_ = r.knob(detach_op, (), 2.0)
                    detach_answers.append([rc, *out_[:2]])
                except TimeoutError:
                    detach_answers.append([-1])
        if rings and now >= next_at:
            if is_open:
                for path, r in rings.items():
                    seq_by_ring[path] = r.close_window()
                next_at = now + every_s - open_s
            else:
                wid += 1
                for path, r in rings.items():
                    seq_by_ring[path] = r.open_window(wid, mask, 250, 10_000)
                windows += 1
                next_at = now + open_s
            is_open = not is_open
        for path, r in rings.items():
            r.heartbeat()
            if path in seq_by_ring and r.acked(seq_by_ring.pop(path)):
                acked += 1
            current = count_kernels(r.drain(), r.abi, per_window, current)
        time.sleep(0.005)
    out, _ = p.communicate()
    err_file.seek(0)
    err = err_file.read()
    err_file.close()
    counts = [per_window[w] for w in sorted(per_window)]
    first = next((i for i, n in enumerate(counts) if n), len(counts))
    # the last window may have been cut by the exit
    empty = sum(1 for n in counts[first:-1] if n == 0)
    status = {}
    for r in rings.values():
        st = r.status()
        status = {
            "shim": st.status,
            "reason": st.reason,
            "records": st.records_written,
            "windows_opened": st.windows_opened,
            "detaches": st.detaches,
        }
        r.close()
    return {
        "mode": mode,
        "detach_knob": detach_answers,
        "exit": p.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "windows": windows,
        "kernels_per_window": counts,
        "empty_windows": empty,
        "result": result(out),
        "stderr_tail": err[-6000:] if p.returncode else "",
        "stderr": err[-200_000:] if keep_stderr else "",
        "gdb_tail": out[-6000:] if gdb and p.returncode else "",
        **status,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--modes", default="detach,disable,detach-noguard,detach-kernel")
    ap.add_argument("--steps", type=int, default=30000)
    ap.add_argument("--threads", type=int, default=4, help="launching threads (--program threads)")
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="threads")
    ap.add_argument("--open-s", type=float, default=0.1)
    ap.add_argument("--every-s", type=float, default=0.3)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting runs after this many seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--settle-s", type=float, default=8.0, help="the *-settled modes' first window")
    ap.add_argument("--backtrace", action="store_true", help="a crash prints its native stack")
    ap.add_argument("--gdb", action="store_true", help="under gdb: a crash prints each thread's stack")
    ap.add_argument("--detach-after-s", type=float, default=12.0, help="mode once: when observation ends")
    ap.add_argument("--hogs", type=int, default=0, help="busy processes sharing --cores with the job")
    ap.add_argument("--cores", default="", help="the job's (and the hogs') cores, e.g. 2,3")
    ap.add_argument("--keep-stderr", action="store_true", help="every run's stderr into --json")
    a = ap.parse_args()
    cores = {int(c) for c in a.cores.split(",") if c.strip()} or None
    if a.hogs and not cores:
        ap.error("--hogs needs --cores")
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; known: {sorted(MODES)}")
    if not SHIM.exists() or not GUARD.exists():
        ap.error("the shim is not built: make -C shim")
    argv = [sys.executable, *PROGRAMS[a.program](a.steps, a.threads)]
    cwd = CWD.get(a.program)
    preload = ""
    if a.backtrace:
        so = Path(tempfile.mkdtemp()) / "crash_backtrace.so"
        src = ROOT / "bench" / "crash_backtrace.c"
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
        preload = str(so)
    # a SIGTERM (tests/gpu/run.sh's timeout) ends the hogs too: the finally below runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    hog = (  # in a session of its own: its worker processes are killed with it
        subprocess.Popen(
            [sys.executable, str(W / "cpu_hog.py"), "--procs", str(a.hogs), "--seconds", "36000"],
            preexec_fn=lambda: os.sched_setaffinity(0, cores or set()),
            start_new_session=True,
        )
        if a.hogs
        else None
    )
    try:
        return stress(a, modes, argv, cwd, preload, cores)
    finally:
        if hog is not None:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()


def stress(
    a: argparse.Namespace, modes: list[str], argv: list[str], cwd: Path | None, preload: str,
    cores: set[int] | None,
) -> int:  # fmt: skip
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    plain = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd, preexec_fn=pin)
    want = result(plain.stdout)
    print(f"plain: exit {plain.returncode} {want}", flush=True)
    rows: list[dict[str, object]] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):  # modes interleaved, so time-varying conditions fall on all alike
            for m in modes:
                if a.budget_s and time.monotonic() - t_start > a.budget_s:
                    break
                row = one_run(
                    m, argv, a.open_s, a.every_s, Path(tmp), a.gdb, a.settle_s, preload, cwd,
                    a.detach_after_s, cores, a.keep_stderr,
                )  # fmt: skip
                row["same_output"] = row["result"] == want
                rows.append(row)
                print(
                    f"run {i + 1} {m}: exit {row['exit']} {row['seconds']} s, {row['windows']} windows, "
                    f"same output {row['same_output']}, {row.get('detaches')} detaches, "
                    f"{row['empty_windows']} empty windows (kernels {row['kernels_per_window']}), "
                    f"shim {row.get('shim')} {row.get('reason', '')!r}",
                    flush=True,
                )
                if row["exit"]:
                    print(str(row["stderr_tail"])[-1200:], flush=True)
    print("\n| mode | runs | not as plain | exits | empty windows |\n| --- | --- | --- | --- | --- |")
    for m in modes:
        rs = [r for r in rows if r["mode"] == m]
        badr = [r for r in rs if r["exit"] or not r["same_output"]]
        empty = sum(int(str(r["empty_windows"])) for r in rs)
        print(f"| {m} | {len(rs)} | {len(badr)} | {sorted({int(str(r['exit'])) for r in rs})} | {empty} |")
    if a.json:
        a.json.write_text(json.dumps({"plain": want, "argv": argv, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
