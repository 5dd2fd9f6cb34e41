"""Medium matmuls with an explicit device synchronization after every step, so the GPU drains and
idles while the host wakes and refills it. Prints a checksum.
python sync_every_step.py [--n N] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=1024)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(0)
w = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16) / a.n**0.5
x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    h = x
    for _ in range(4):
        h = torch.tanh(h @ w)
    torch.cuda.synchronize()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={h.float().mean().item():.6f}", flush=True)
