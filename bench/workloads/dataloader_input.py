"""A torch DataLoader input pipeline (two workers) with pin_memory at its default (False): every
batch reaches the GPU by a copy from pageable memory, staged by the driver, on the training loop's
thread.
Headroom: DataLoader pinning (gitmd's `dataloader_pin_memory` framework knob), after which the
loader's pin thread stages batches in page-locked memory and the copies run at pinned speed.
Prints a checksum of the work, the same at any setting.
python dataloader_input.py [--mb M] [--steps N | --seconds T]"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--mb", type=int, default=32, help="MiB per batch")
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(0)
rows = a.mb * (1 << 20) // (4 * 1024)
pool = [torch.randn(rows, 1024) for _ in range(4)]  # prepared batches: the loader only hands them out


class Batches(Dataset):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        return pool[i % len(pool)]


# two workers (the job's choice), pin_memory left at its default (False): with pinning the loader's
# pin thread stages each batch in page-locked memory off the training loop's thread
loader = DataLoader(Batches(), batch_size=None, shuffle=False, num_workers=2)
w = torch.randn(1024, 256, device="cuda") / 32
acc = torch.zeros((), device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
for batch in loader:
    if (step >= a.steps) if a.steps else (time.monotonic() >= end):
        break
    x = batch.to("cuda", non_blocking=True)
    acc += torch.relu(x @ w).mean()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={acc.item() / step:.6f}", flush=True)
