"""fp32 MLP training (headroom: TF32 tensor cores). Prints its final loss.
python mlp_train.py [--batch B] [--hidden H] [--seed S] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=512)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(a.seed)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, a.hidden),
    torch.nn.GELU(),
    torch.nn.Linear(a.hidden, a.hidden),
    torch.nn.GELU(),
    torch.nn.Linear(a.hidden, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(a.batch, 1024, device="cuda")
y = torch.randint(0, 10, (a.batch,), device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
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
