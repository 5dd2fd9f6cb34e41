"""GRU inference over random sequences, no gradients. Prints a checksum of the last output.
python rnn_infer.py [--batch B] [--seq L] [--seed S] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=64)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(a.seed)
rnn = torch.nn.GRU(256, 512, num_layers=2, batch_first=True).cuda().eval()
head = torch.nn.Linear(512, 32).cuda().eval()
x = torch.randn(a.batch, a.seq, 256, device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
with torch.no_grad():
    while (step < a.steps) if a.steps else (time.monotonic() < end):
        out, _ = rnn(x)
        y = torch.softmax(head(out[:, -1]), dim=-1)
        step += 1
        if step == 3:
            torch.cuda.synchronize()
            t_ready = time.monotonic()
            print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} checksum={y.sum().item():.6f}", flush=True)
