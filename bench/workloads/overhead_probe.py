"""The workload the shim-overhead benchmark drives over stdin/stdout (one process per sample).

Commands, one per line:  "launch N"  -> N tiny in-place adds (launch-bound), prints µs per op;
                         "train N"   -> N steps of a small MLP (forward, backward, SGD), prints ms per step.
                         "small N"   -> N steps of a narrow 8-layer MLP with AdamW (launch-bound, as a small
                                        model's training is), prints ms per step.
Prints "ready" once CUDA is up and both workloads are warm.
"""

import os
import sys
import time

import torch


def main() -> None:
    cpus = os.environ.get("GITM_BENCH_CPUS")
    if cpus:  # the same CPUs in every condition: process-to-process placement noise is not the shim's
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    torch.manual_seed(0)
    small = torch.zeros(256, device="cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 2048)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(1024, 2048, device="cuda")
    layers = [m for _ in range(8) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]
    narrow = torch.nn.Sequential(*layers).cuda()
    narrow_opt = torch.optim.AdamW(narrow.parameters(), lr=1e-4)
    xs = torch.randn(64, 256, device="cuda")

    def launch(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            small.add_(1.0)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    def train(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e3

    def narrow_train(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            narrow_opt.zero_grad(set_to_none=True)
            narrow(xs).square().mean().backward()
            narrow_opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e3

    launch(2000)
    train(20)
    narrow_train(20)
    print("ready", flush=True)
    run = {"launch": launch, "train": train, "small": narrow_train}
    for line in sys.stdin:
        cmd, n = line.split()
        value = run[cmd](int(n))
        print(f"{value:.4f}", flush=True)


if __name__ == "__main__":
    main()
