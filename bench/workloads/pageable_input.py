"""An input pipeline that copies each batch from pageable host memory (plain numpy arrays), then
computes on it. Headroom: page-locking the source buffers (`--pin` does it in the program, with
cudaHostRegister: the oracle's setting for gitmd's pin_host_buffer lever).
Prints `checksum` (each batch's result at the last step, summed: the same for any number of steps)
and `maxdev` (the largest difference between a step's result and its batch's first result: 0 unless
a copy read something other than the batch).
python pageable_input.py [--mb M] [--steps N | --seconds T] [--pin]"""

import argparse
import time

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--mb", type=int, default=64)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
p.add_argument("--pin", action="store_true", help="page-lock the batches (cudaHostRegister)")
a = p.parse_args()
rng = np.random.default_rng(0)
rows = a.mb * (1 << 20) // (4 * 1024)
batches = [rng.standard_normal((rows, 1024), dtype=np.float32) for _ in range(2)]
if a.pin:
    rt = torch.cuda.cudart()
    for b in batches:
        assert int(rt.cudaHostRegister(b.ctypes.data, b.nbytes, 0)) == 0
w = torch.randn(1024, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) / 32
first = torch.zeros(2, device="cuda")
last = torch.zeros(2, device="cuda")
maxdev = torch.zeros((), device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    i = step % 2
    x = torch.from_numpy(batches[i]).to("cuda")  # pageable source: a staged, synchronous copy
    v = torch.relu(x @ w).mean()
    if step < 2:
        first[i] = v
    last[i] = v
    maxdev = torch.maximum(maxdev, (v - first[i]).abs())
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(
    f"result steps={step} step_ms={step_ms:.4f} maxdev={maxdev.item():.3g} checksum={last.sum().item():.6f}",
    flush=True,
)
