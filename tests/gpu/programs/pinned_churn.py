"""Copies two numpy batches (pageable, 64 MiB each) to the GPU every step and checks on the device
that each copy holds its batch's data. Phase A runs until the file GO exists (gitmd captures and
page-locks the batches meanwhile); phase B keeps copying for --seconds, and after its first third
replaces a batch with a new array every 25 steps (the old one freed: glibc gives its pages back and
usually maps the new one at the same address) and forks a child that reads a batch.
Prints `result steps=N a_ms=X b_ms=Y mismatches=M fork=ok|failed|-`.

--register-unguarded page-locks the batches itself with cudaHostRegister and never unregisters
them: what a registration that outlives its buffer does to later copies (the hazard gitmd's free
guard prevents).
python pinned_churn.py GO [--seconds S] [--register-unguarded]"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("go")
p.add_argument("--seconds", type=float, default=9.0)
p.add_argument("--mb", type=int, default=64)
p.add_argument("--register-unguarded", action="store_true")
a = p.parse_args()
rng = np.random.default_rng(1)
rows = a.mb * (1 << 20) // (4 * 1024)


def batch() -> np.ndarray:
    return rng.standard_normal((rows, 1024), dtype=np.float32)


batches = [batch(), batch()]
sums = [float(b.sum(dtype=np.float64)) for b in batches]
if a.register_unguarded:
    for b in batches:
        assert int(torch.cuda.cudart().cudaHostRegister(b.ctypes.data, b.nbytes, 0)) == 0
step = mismatches = 0


def one() -> None:
    global step, mismatches
    i = step % 2
    x = torch.from_numpy(batches[i]).to("cuda")
    s = x.sum(dtype=torch.float64).item()
    if abs(s - sums[i]) > 1e-6 * abs(sums[i]) + 1e-2:
        mismatches += 1
    step += 1


for _ in range(4):
    one()
print("ready", flush=True)
t0, n0 = time.monotonic(), step
deadline = t0 + 120
while not Path(a.go).exists() and time.monotonic() < deadline:
    one()
a_ms = 1e3 * (time.monotonic() - t0) / max(1, step - n0)
t1, n1 = time.monotonic(), step
end = t1 + a.seconds
churn_from = t1 + a.seconds / 3
b_ms = 0.0
fork = "-"
while time.monotonic() < end:
    one()
    now = time.monotonic()
    if now >= churn_from:
        if not b_ms:
            b_ms = 1e3 * (now - t1) / max(1, step - n1)
        if step % 25 == 0:
            i = step % 2
            batches[i] = batch()  # the old array is freed here
            sums[i] = float(batches[i].sum(dtype=np.float64))
        if fork == "-":
            pid = os.fork()
            if pid == 0:  # the child reads the page-locked batch, never CUDA
                ok = np.isfinite(batches[0].sum(dtype=np.float64)) and np.isfinite(batches[1].sum())
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            fork = "ok" if os.waitstatus_to_exitcode(status) == 0 else "failed"
print(f"result steps={step} a_ms={a_ms:.3f} b_ms={b_ms:.3f} mismatches={mismatches} fork={fork}", flush=True)
