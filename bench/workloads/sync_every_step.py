"""Medium matmuls with an explicit device synchronization after every step, so the GPU drains and
idles while the host wakes and refills it. The CUDA context waits by blocking sync (as frameworks
that save host CPU set it): each synchronization sleeps until the driver's interrupt wakes the
thread. Prints a checksum.
python sync_every_step.py [--n N] [--steps N | --seconds T] [--sched blocking|spin|yield|auto]
(--sched spin: the program's own switch for what gitmd's sync_spin lever changes)"""

import argparse
import ctypes
import time

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=3072)  # at 1024 the loop is launch-bound, not sync-bound
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
p.add_argument("--sched", choices=("blocking", "spin", "yield", "auto"), default="blocking")
a = p.parse_args()
# the primary context's flags, before torch creates it (what cudaSetDeviceFlags does)
SCHED = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}[a.sched]
cu = ctypes.CDLL("libcuda.so.1")
if cu.cuInit(0) != 0 or cu.cuDevicePrimaryCtxSetFlags_v2(0, SCHED) != 0:
    raise SystemExit("could not set the primary context's scheduling flags")

import torch  # noqa: E402

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
