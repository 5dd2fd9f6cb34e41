"""Busy CPU processes (the co-located load of the CPU-contention case), pinned where the caller
pins them. python cpu_hog.py --procs N --seconds T"""

import argparse
import multiprocessing
import time


def spin(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30.0)
    a = p.parse_args()
    until = time.monotonic() + a.seconds
    ps = [multiprocessing.Process(target=spin, args=(until,)) for _ in range(a.procs)]
    for q in ps:
        q.start()
    for q in ps:
        q.join()
