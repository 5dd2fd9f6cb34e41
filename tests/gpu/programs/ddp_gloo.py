"""A torchrun DDP training whose ranks all share GPU 0 through the gloo backend (the single-GPU host
has one GPU; NCCL will not put two ranks on one GPU). Each rank prints `ready <rank> <pid>`, trains
until the file argv[1] appears, then prints `done <rank> <steps> <loss>`.

    torchrun --standalone --nproc-per-node 2 ddp_gloo.py STOPFILE
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

stop = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
dev = torch.device("cuda", 0)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 512, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
print(f"ready {rank} {os.getpid()}", flush=True)
steps, deadline = 0, time.monotonic() + 300
while True:
    # every rank stops at the same step: rank 0 decides, the others hear it through a collective
    flag = torch.tensor([1 if stop.exists() or time.monotonic() > deadline else 0])
    dist.broadcast(flag, 0)
    if flag.item():
        break
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    steps += 1
print(f"done {rank} {steps} {loss.item():.6f}", flush=True)
dist.destroy_process_group()
