"""An input pipeline that copies each batch from pageable host memory (a plain numpy array), then
computes on it. Headroom: pinning the source buffer. Prints a checksum.
python pageable_input.py [--mb M] [--steps N | --seconds T]"""

import argparse
import time

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--mb", type=int, default=64)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
rng = np.random.default_rng(0)
rows = a.mb * (1 << 20) // (4 * 1024)
batches = [rng.standard_normal((rows, 1024), dtype=np.float32) for _ in range(2)]
w = torch.randn(1024, 256, device="cuda") / 32
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
acc = torch.zeros((), device="cuda")
while (step < a.steps) if a.steps else (time.monotonic() < end):
    x = torch.from_numpy(batches[step % 2]).to("cuda")  # pageable source: a staged, synchronous copy
    acc += torch.relu(x @ w).mean()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={acc.item() / step:.6f}", flush=True)
