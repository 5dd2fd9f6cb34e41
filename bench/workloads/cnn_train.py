"""A small convolutional network trained on random images (fp32, cuDNN). Prints its final loss.
python cnn_train.py [--batch B] [--size S] [--seed S] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=32)
p.add_argument("--size", type=int, default=32)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(a.seed)
nn = torch.nn
model = nn.Sequential(
    nn.Conv2d(3, 32, 3, padding=1),
    nn.BatchNorm2d(32),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1),
    nn.BatchNorm2d(64),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(64, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(a.batch, 3, a.size, a.size, device="cuda")
y = torch.randint(0, 10, (a.batch,), device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    step += 1
    if step == 3:
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
torch.cuda.synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} loss={loss.item():.6f}", flush=True)
