"""Known values read back with .item() (a 4-byte device-to-host copy and a stream sync each), after
a trigger file appears: the shim's payload samples must hold exactly these values.
python torch_item.py TRIGGER END N"""

import os
import sys
import time

import torch

trigger, end, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
x = torch.arange(4, dtype=torch.float32, device="cuda")  # sums to 6
torch.cuda.synchronize()
print("ready", flush=True)
while not os.path.exists(trigger):
    time.sleep(0.01)
values = [(x * (step + 0.5)).sum().item() for step in range(n)]
print("done " + " ".join(f"{v:.1f}" for v in values), flush=True)
while not os.path.exists(end):
    time.sleep(0.01)
