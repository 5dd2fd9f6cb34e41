"""A small transformer encoder trained on random tokens (fp32). Prints its final loss.
python transformer_train.py [--batch B] [--seq L] [--layers N] [--seed S] [--steps N | --seconds T]"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
torch.manual_seed(a.seed)
vocab, dim = 4096, 256
layer = torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True)
model = torch.nn.Sequential(
    torch.nn.Embedding(vocab, dim), torch.nn.TransformerEncoder(layer, a.layers), torch.nn.Linear(dim, vocab)
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    opt.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), tokens.view(-1))
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
