"""Busy CPU processes (the co-located load of the CPU-contention case), pinned where the caller
pins them. python cpu_hog.py --procs N --seconds T"""

import argparse
import multiprocessing
import os
import time


def spin(until: float, parent: int) -> None:
    x, n = 0, 0
    while time.monotonic() < until:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        n += 1
        if n % 1_000_000 == 0 and os.getppid() != parent:
            return  # the parent was killed: the load goes with it (bench, 2026-12-03: orphans stayed)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30.0)
    a = p.parse_args()
    until = time.monotonic() + a.seconds
    ps = [multiprocessing.Process(target=spin, args=(until, os.getpid())) for _ in range(a.procs)]
    for q in ps:
        q.start()
    for q in ps:
        q.join()
