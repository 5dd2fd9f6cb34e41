"""A co-tenant on the same GPU: a background process that keeps the GPU busy with bf16 GEMMs
(time-sliced against the foreground job: each context gets the GPU in turn). `--yield-share P` makes
it hold its own launches for P permille of every 100 ms — what gitmd's cotenant_yield lever does to a
background job through the shim, here done by the program itself (the oracle's setting).
python cotenant_hog.py [--seconds T] [--yield-share P]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=600.0)
p.add_argument("--size", type=int, default=8192)
p.add_argument("--yield-share", type=int, default=0, help="permille of each 100 ms spent holding launches")
a = p.parse_args()
x = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
y = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + a.seconds
steps = 0
print("ready", flush=True)
while time.monotonic() < end:
    if a.yield_share:
        phase = (time.monotonic() * 1000.0) % 100.0
        if phase < a.yield_share / 10.0:
            torch.cuda.synchronize()  # what was launched drains; nothing new until the phase ends
            time.sleep((a.yield_share / 10.0 - phase) / 1000.0)
    x = (x @ y) * 1e-4
    steps += 1
    if steps % 8 == 0:
        torch.cuda.synchronize()  # a bounded queue, as a real job's data dependencies give
torch.cuda.synchronize()
print(f"result steps={steps} checksum={float(x.float().abs().mean()):.6f}", flush=True)
