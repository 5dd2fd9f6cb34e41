"""A launch-bound loop: each step is many tiny element-wise kernels on small tensors, so the GPU
waits on the host issuing them. Prints a checksum.
python launch_bound.py [--size N] [--ops K] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--size", type=int, default=1024)
p.add_argument("--ops", type=int, default=12)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(0)
x = torch.randn(a.size, device="cuda")
b = torch.randn(a.size, device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    for _ in range(a.ops // 3):
        x.mul_(0.999)
        x.add_(b, alpha=0.001)
        x.clamp_(-10, 10)
    s = x.sum()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
    if step % 200 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={s.item():.6f}", flush=True)
