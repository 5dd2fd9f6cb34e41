"""A small deterministic fp32 training loop that prints its loss: its output must not change when
gitmd captures it, or when gitmd dies in the middle of a window.   python torch_train.py STEPS"""

import sys

import torch

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 2048),
    torch.nn.GELU(),
    torch.nn.Linear(2048, 2048),
    torch.nn.GELU(),
    torch.nn.Linear(2048, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 1024, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")
print("started", flush=True)
for step in range(int(sys.argv[1])):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
print(f"final {loss.item():.6f}", flush=True)
