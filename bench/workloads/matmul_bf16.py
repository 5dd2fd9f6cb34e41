"""Chained bf16 matmuls, already on tensor cores and GPU-bound: a negative control (no headroom).
Prints a checksum. python matmul_bf16.py [--n N] [--depth D] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=8192)
p.add_argument("--depth", type=int, default=4)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(a.seed)
w = [torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16) / a.n**0.5 for _ in range(a.depth)]
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    h = x
    for m in w:
        h = torch.relu(h @ m)
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
    if step % 50 == 0:
        torch.cuda.synchronize()  # keep the host from queueing minutes of work ahead
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={h.float().abs().mean().item():.6f}", flush=True)
