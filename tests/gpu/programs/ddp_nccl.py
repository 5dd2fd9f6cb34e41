"""A torchrun DDP training over NCCL, one rank per GPU, with a planted slow rank (issue 29's
multi-GPU test). The slow rank does --host-ms of busy CPU work before each step (its input pipeline),
or, with --pin-slow CPUS, runs pinned to those CPUs (which the test fills with busy processes): either
way the other ranks wait for it in the all-reduce. Each rank prints `ready <rank> <pid>`, trains until
--steps steps or until the file argv[1] appears, then prints `done <rank> <steps> <loss>`; rank 0
also prints `result steps=<n> loss=<loss>` (the equivalence contract's metric).

    torchrun --standalone --nproc-per-node 2 ddp_nccl.py STOPFILE [--steps N] [--host-ms MS]
        [--slow-rank R] [--pin-slow 2,3]
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("stop", type=Path)
p.add_argument("--steps", type=int, default=0, help="0: until the stop file (or 300 s)")
p.add_argument("--host-ms", type=float, default=0.0)
p.add_argument("--slow-rank", type=int, default=1)
p.add_argument("--pin-slow", default="", help="CPUs the slow rank runs on")
a = p.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
local = int(os.environ["LOCAL_RANK"])
if rank == a.slow_rank and a.pin_slow:
    os.sched_setaffinity(0, {int(c) for c in a.pin_slow.split(",")})
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
torch.manual_seed(0)
model = DistributedDataParallel(
    torch.nn.Sequential(
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 10),
    ).to(dev),
    device_ids=[local],
)  # fmt: skip
opt = torch.optim.SGD(model.parameters(), lr=0.01)
g = torch.Generator(device=dev).manual_seed(1 + rank)  # each rank its own shard, the same every run
x = torch.randn(512, 2048, device=dev, generator=g)
y = torch.randint(0, 10, (512,), device=dev, generator=g)


def input_pipeline(ms: float) -> None:
    """The planted slow rank's host work: a busy loop, as a CPU-bound data loader is."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1


print(f"ready {rank} {os.getpid()}", flush=True)
steps, deadline = 0, time.monotonic() + 300
while True:
    # every rank stops at the same step: rank 0 decides, the others hear it through a collective
    done = steps >= a.steps if a.steps else a.stop.exists() or time.monotonic() > deadline
    flag = torch.tensor([1 if done else 0], device=dev)
    dist.broadcast(flag, 0)
    if flag.item():
        break
    if rank == a.slow_rank and a.host_ms:
        input_pipeline(a.host_ms)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    steps += 1
print(f"done {rank} {steps} {loss.item():.6f}", flush=True)
if rank == 0:
    print(f"result steps={steps} loss={loss.item():.6f}", flush=True)
dist.destroy_process_group()
