"""Multi-stream priority inversion: a latency-critical chain of small kernels on one stream, read
back every step (`.item()` synchronizes that stream), while a second stream keeps the GPU full of
bulk work (large elementwise kernels: many short blocks). Both streams have the same (default)
priority, so each of the chain's kernels waits until the bulk kernel ahead of it has dispatched all
its blocks; with a higher priority for the chain's stream its blocks go first as SMs free up
(priority does not preempt: behind cuBLAS's persistent GEMMs, `--background gemm`, it gains
nothing, which the H200 showed). The chain's values do not depend on scheduling: the printed loss
is the same at any priority.
python stream_inversion.py [--mb MB] [--chain K] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--background", choices=("elementwise", "gemm"), default="elementwise")
p.add_argument("--mb", type=int, default=1024, help="elementwise: MiB of each background kernel's tensor")
p.add_argument("--n", type=int, default=8192, help="gemm: size of the background GEMMs")
p.add_argument("--chain", type=int, default=4, help="small kernels per step on the critical stream")
p.add_argument("--depth", type=int, default=3, help="background kernels kept queued")
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
p.add_argument("--critical-priority", type=int, default=0, help="for the oracle: the program's own choice")
a = p.parse_args()
torch.manual_seed(0)
critical, background = torch.cuda.Stream(priority=a.critical_priority), torch.cuda.Stream()
if a.background == "gemm":
    big = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16) / a.n**0.5
    acc = torch.zeros(a.n, a.n, device="cuda", dtype=torch.bfloat16)
else:
    big = torch.ones(a.mb << 18, device="cuda")  # fp32: MiB * 2^18 elements
    acc = torch.empty_like(big)
x = torch.randn(256, 256, device="cuda") / 16
w = torch.randn(256, 256, device="cuda") / 16
torch.cuda.synchronize()
in_flight: list[torch.cuda.Event] = []
end = time.monotonic() + a.seconds
step, total, bulk = 0, 0.0, 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    # keep the background stream `--depth` kernels deep without ever waiting for it: the GPU always
    # has bulk work to run, and the step's time is the critical chain's
    while in_flight and in_flight[0].query():
        in_flight.pop(0)
    with torch.cuda.stream(background):
        while len(in_flight) < a.depth:
            if a.background == "gemm":
                torch.mm(big, big, out=acc)
            else:
                torch.mul(big, 1.0001, out=acc)
            ev = torch.cuda.Event()
            ev.record(background)
            in_flight.append(ev)
            bulk += 1
    with torch.cuda.stream(critical):
        h = x
        for _ in range(a.chain):
            h = torch.tanh(h @ w)
        total += h.sum().item()  # the step's result: a copy and a sync on the critical stream
    step += 1
    if step == 3:
        print("ready", flush=True)
torch.cuda.synchronize()
elapsed = time.monotonic() - (end - a.seconds)
print(
    f"result steps={step} bulk={bulk} step_ms={1e3 * elapsed / step:.3f} loss={total / step:.9f}",
    flush=True,
)
