"""A job that profiles itself with torch.profiler (CUPTI through Kineto) while gitmd may open a
window: its own profile must still hold its kernels. Prints "ready", waits for TRIGGER, profiles
200 multiplies, prints "kernels N" (CUDA kernel events the profiler saw), then multiplies every
10 ms until END exists.
python torch_profiled.py TRIGGER END"""

import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

trigger, end = sys.argv[1], sys.argv[2]
x = torch.ones(1024, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
while not os.path.exists(trigger):
    time.sleep(0.01)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(200):
        x.mul_(1.0001)
    torch.cuda.synchronize()
    time.sleep(1.0)  # the profiler is active while gitmd's window opens
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print(f"kernels {len(kernels)}", flush=True)
while not os.path.exists(end):  # still working after the profile: gitmd may capture again
    x.mul_(1.0001)
    torch.cuda.synchronize()
    time.sleep(0.01)
