"""Takes the labelled set of real captures on a GPU host: every workload of bench/workloads in its
variants (batch, sequence length, grid, seed, restart) for the fingerprint benchmark, and the
planted-cause cases for attribution (launch-bound, pageable copies, allocator churn, a CPU hog on the
job's cores, a co-tenant on the same GPU, a synchronization every step, a clean control).

Each case runs unmodified under `gitmctl run` on a real gitmd (NVML backend); after a warm-up it
takes two raw windows with `gitmctl trace --raw` (the first is the history the second is judged
against; a case's side load — CPU hog, co-tenant — starts between them), then ends the job.
Writes DIR/<case>.w1.npz, DIR/<case>.w2.npz and DIR/manifest-<time>.json.

    python bench/capture_set.py DIR [--only NAME,...] [--window S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import Gitmd  # noqa: E402

W = ROOT / "bench" / "workloads"
PY = sys.executable


@dataclass
class Case:
    name: str
    workload: str  # the fingerprint label: same label, same program
    argv: list[str]
    cause: str = ""  # the planted cause, for the attribution validation ("none": a clean control)
    side: list[str] = field(default_factory=list)  # a load started between the two windows
    pin: str = ""  # taskset CPU list for the job and its side load


def py(script: str, *args: str) -> list[str]:
    return [PY, str(W / f"{script}.py"), "--seconds", "120", *args]


def cases(stencil: str) -> list[Case]:
    hog = [PY, str(W / "cpu_hog.py"), "--procs", "6", "--seconds", "120"]
    return [
        Case("mlp-b512-h2048", "mlp", py("mlp_train", "--batch", "512", "--hidden", "2048")),
        Case(
            "mlp-b256-h1024-s1",
            "mlp",
            py("mlp_train", "--batch", "256", "--hidden", "1024", "--seed", "1"),
        ),
        Case("mlp-b1024-h2048-s2", "mlp", py("mlp_train", "--batch", "1024", "--seed", "2")),
        Case("mlp-b512-h2048-restart", "mlp", py("mlp_train", "--batch", "512", "--hidden", "2048")),
        Case("tfm-b16-l128", "transformer", py("transformer_train")),
        Case(
            "transformer-b16-l256-s1",
            "transformer",
            py("transformer_train", "--seq", "256", "--seed", "1"),
        ),
        Case(
            "transformer-b32-l128-s2",
            "transformer",
            py("transformer_train", "--batch", "32", "--seed", "2"),
        ),
        Case("tfm-b16-l128-restart", "transformer", py("transformer_train")),
        Case("cnn-b32-s32", "cnn", py("cnn_train")),
        Case("cnn-b64-s32-s1", "cnn", py("cnn_train", "--batch", "64", "--seed", "1")),
        Case("cnn-b32-s64-s2", "cnn", py("cnn_train", "--size", "64", "--seed", "2")),
        Case("rnn-b16-l64", "rnn", py("rnn_infer")),
        Case("rnn-b32-l128-s1", "rnn", py("rnn_infer", "--batch", "32", "--seq", "128", "--seed", "1")),
        Case("rnn-b8-l32-s2", "rnn", py("rnn_infer", "--batch", "8", "--seq", "32", "--seed", "2")),
        Case("bf16-n8192", "matmul_bf16", py("matmul_bf16"), cause="none"),
        Case("bf16-n4096", "matmul_bf16", py("matmul_bf16", "--n", "4096")),
        Case("bf16-n6144-s1", "matmul_bf16", py("matmul_bf16", "--n", "6144", "--seed", "1")),
        Case("stencil-4m-256", "stencil", [stencil, str(1 << 22), "256", "120"]),
        Case("stencil-1m-512", "stencil", [stencil, str(1 << 20), "512", "120"]),
        Case("stencil-16m-128", "stencil", [stencil, str(1 << 24), "128", "120"]),
        Case("cupy-fft-1m", "cupy_fft", py("cupy_fft")),
        Case("cupy-fft-4m", "cupy_fft", py("cupy_fft", "--n", str(1 << 22))),
        Case("cupy-fft-256k", "cupy_fft", py("cupy_fft", "--n", str(1 << 18))),
        Case("launch-1k", "launch_bound", py("launch_bound"), cause="launch_bound"),
        Case("launch-64k", "launch_bound", py("launch_bound", "--size", "65536")),
        Case("launch-1k-ops24", "launch_bound", py("launch_bound", "--ops", "24")),
        # n=2048 is launch-bound while CUPTI records (the GPU finishes before the host syncs): a
        # fingerprint variant; at n=3072 the host is ahead and each step's sync drains the GPU.
        # (--sched auto: as these fixtures were captured, before the scoreboard planted blocking sync)
        Case("sync-n2048", "sync_every_step", py("sync_every_step", "--n", "2048", "--sched", "auto")),
        Case(
            "sync-n3072",
            "sync_every_step",
            py("sync_every_step", "--n", "3072", "--sched", "auto"),
            cause="sync_stall",
        ),
        Case("sync-n1536", "sync_every_step", py("sync_every_step", "--n", "1536", "--sched", "auto")),
        Case("pageable-64mb", "pageable_input", py("pageable_input"), cause="pageable_copy"),
        Case("pageable-32mb", "pageable_input", py("pageable_input", "--mb", "32")),
        Case("alloc-cap6", "alloc_churn", py("alloc_churn"), cause="allocator"),
        Case("alloc-cap8", "alloc_churn", py("alloc_churn", "--cap-gb", "8")),
        Case("cpu-hog", "launch_bound", py("launch_bound"), cause="host_contention", side=hog, pin="2,3"),
        Case(
            "cotenant",
            "matmul_bf16",
            py("matmul_bf16", "--n", "4096"),
            cause="cotenant",
            side=py("matmul_bf16", "--n", "8192", "--seed", "7"),
        ),
    ]


def ctl(g: Gitmd, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "gitmctl", "--socket", str(g.socket), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def wait_ready(g: Gitmd, name: str, log: Path, timeout_s: float = 120) -> None:
    """The job printed "ready" (its first steps ran) and its ring is there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and b"ready" in log.read_bytes():
            r = ctl(g, "job", name, "--json")
            if r.returncode == 0 and json.loads(r.stdout).get("processes"):
                return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: not ready with a ring in {timeout_s} s")


def spawn(argv: list[str], pin: str, log: Path) -> subprocess.Popen[bytes]:
    if pin:
        argv = ["taskset", "-c", pin, *argv]
    with open(log, "ab") as f:
        return subprocess.Popen(argv, stdout=f, stderr=f, start_new_session=True, cwd=ROOT)


def stop(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(20)


def take(g: Gitmd, c: Case, out: Path, window_s: float, warmup_s: float, logs: Path) -> dict[str, object]:
    t0 = time.monotonic()
    log = logs / f"{c.name}.log"
    job = spawn(
        [PY, "-m", "gitmctl", "--socket", str(g.socket), "run", "--name", c.name, "--", *c.argv],
        c.pin,
        log,
    )
    side = None
    rec: dict[str, object] = {**asdict(c), "files": [], "notes": []}
    try:
        wait_ready(g, c.name, log)
        time.sleep(warmup_s)
        for w in (1, 2):
            if w == 2 and c.side:
                side = spawn(c.side, c.pin, logs / f"{c.name}.side.log")
                time.sleep(6.0)  # the side load's start-up (a co-tenant imports torch, fills the GPU)
            f = out / f"{c.name}.w{w}.npz"
            r = ctl(g, "trace", c.name, "--duration", str(window_s), "--raw", "-o", str(f), "--json")
            if r.returncode != 0:
                rec["notes"].append(f"window {w}: gitmctl trace exit {r.returncode}: {r.stderr.strip()}")  # type: ignore[union-attr]
                continue
            rec["files"].append(f.name)  # type: ignore[union-attr]
            if w == 2:  # the live attribution of that window, judged against the first (GetAttribution)
                e = ctl(g, "explain", c.name)
                (out / f"{c.name}.explain.txt").write_text(e.stdout + e.stderr)
            if job.poll() is not None:
                rec["notes"].append(f"the job ended early, exit {job.returncode}")  # type: ignore[union-attr]
                break
    finally:
        if side is not None:
            stop(side)
        stop(job)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--window", type=float, default=0.5, help="window length, seconds")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds after the job says it is ready")
    ap.add_argument("--budget", type=float, default=0, help="take no new case after this many seconds")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    logs = a.out / "logs"
    logs.mkdir(exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="gitm-capset-"))
    stencil = str(build / "stencil_step")
    subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", stencil, str(W / "stencil_step.cu")], check=True)
    chosen = [c for c in cases(stencil) if not a.only or c.name in a.only.split(",")]
    config = (
        '[telemetry]\nbackend = "nvml"\n[metrics]\nport = 0\n'
        "[capture]\nwindow_every_s = 0\nring_records = 1048576\ncontext_interval_ms = 10\n"
    )
    g = Gitmd(build / "gitmd", config)
    g.start()
    manifest = []
    t0 = time.monotonic()
    try:
        for i, c in enumerate(chosen, 1):
            if a.budget and time.monotonic() - t0 > a.budget:
                left = [c.name for c in chosen[i - 1 :]]
                print(f"budget spent; not taken: {','.join(left)}", flush=True)
                break
            rec = take(g, c, a.out, a.window, a.warmup, logs)
            manifest.append(rec)
            print(
                f"[{i}/{len(chosen)}] {c.name}: {len(rec['files'])} windows in {rec['seconds']} s "  # type: ignore[arg-type]
                f"{'; '.join(rec['notes'])}",
                flush=True,
            )  # type: ignore[arg-type]
    finally:
        g.stop()
        shutil.copy(g.log, logs / "gitmd.log")
        (a.out / f"manifest-{int(time.time())}.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
