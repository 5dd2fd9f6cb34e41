"""Allocator churn under a memory cap: each step works on a buffer of another large size (sizes
cycle, like length-bucketed batches) and, to stay under its cap, the program hands the cached
memory back after every step (torch.cuda.empty_cache), so every step pays a cudaFree (which
synchronizes the device) and a cudaMalloc. Prints a checksum.
python alloc_churn.py [--cap-gb G] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--cap-gb", type=float, default=6.0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gb * 2**30 / total))
sizes_mb = [256, 384, 320, 448, 288]
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
acc = torch.zeros((), device="cuda")
while (step < a.steps) if a.steps else (time.monotonic() < end):
    n = sizes_mb[step % len(sizes_mb)] * (1 << 20) // 4
    buf = torch.empty(n, device="cuda")
    buf.fill_(1.0 / n)
    acc += buf.sum()
    del buf
    torch.cuda.empty_cache()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={acc.item() / step:.6f}", flush=True)
