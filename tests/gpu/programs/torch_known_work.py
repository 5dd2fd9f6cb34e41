"""An unmodified torch program with an exactly known amount of work, in itself and in a child:

    python torch_known_work.py TRIGGER END ADDS MULS COPIES

Prints "ready" once CUDA is warm and the spawned child is ready too; after TRIGGER appears the
main process runs ADDS in-place adds, COPIES pageable and COPIES pinned host-to-device copies and
one new 256 MiB allocation; the child runs MULS in-place multiplies. Prints "done <sum>".
"""

import multiprocessing as mp
import os
import sys
import time

import torch


def wait_file(path: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.01)


def child(trigger: str, end: str, muls: int, ready: "mp.synchronize.Event") -> None:
    z = torch.ones(1 << 16, device="cuda")
    torch.cuda.synchronize()
    ready.set()
    wait_file(trigger)
    for _ in range(muls):
        z.mul_(1.0001)
    torch.cuda.synchronize()
    wait_file(end)


def main() -> None:
    trigger, end, adds, muls, copies = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        int(sys.argv[4]),
        int(sys.argv[5]),
    )
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=child, args=(trigger, end, muls, ready))
    proc.start()
    x = torch.zeros(1 << 16, device="cuda")
    host = torch.arange(1 << 20, dtype=torch.float32)
    pinned = host.clone().pin_memory()
    dev = torch.empty(1 << 20, device="cuda")
    torch.cuda.synchronize()
    ready.wait(120)
    print("ready", os.getpid(), proc.pid, flush=True)
    wait_file(trigger)
    for _ in range(adds):
        x.add_(1.0)
    for _ in range(copies):
        dev.copy_(host)  # pageable source
        dev.copy_(pinned, non_blocking=True)  # pinned source
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # a new cudaMalloc segment
    torch.cuda.synchronize()
    print("done", float(x[0]), int(big.numel()), flush=True)  # x[0]: a 4-byte copy, no kernel
    wait_file(end)
    proc.join(60)


if __name__ == "__main__":
    main()
