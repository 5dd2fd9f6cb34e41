"""Launch-bound work from several host threads at once, each on its own stream with its own tensors,
so the result is exact whatever the interleaving. Prints one line: the steps and a checksum per
thread. python threads_launch.py STEPS THREADS"""

import sys
import threading

import torch

steps, threads = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
data = [(torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")) for _ in range(threads)]
sums: list[float] = [0.0] * threads


def work(i: int) -> None:
    x, b = data[i]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for n in range(steps):
            x.mul_(0.999)
            x.add_(b, alpha=0.001)
            x.clamp_(-10, 10)
            if n % 500 == 0:
                s.synchronize()
        s.synchronize()
    sums[i] = float(x.sum().item())


ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(f"result steps={steps} " + " ".join(f"sum{i}={v:.6f}" for i, v in enumerate(sums)), flush=True)
