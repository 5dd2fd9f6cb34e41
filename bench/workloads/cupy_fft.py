"""No torch: CuPy FFT filtering of a signal, then element-wise work and a reduction, every step.
Prints a checksum. python cupy_fft.py [--n N] [--steps N | --seconds T]"""

import argparse
import time

import cupy as cp

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=1 << 20)
p.add_argument("--steps", type=int, default=0)
p.add_argument("--seconds", type=float, default=30.0)
a = p.parse_args()
rng = cp.random.default_rng(0)
sig = rng.standard_normal(a.n, dtype=cp.float32)
mask = (cp.arange(a.n // 2 + 1) < a.n // 8).astype(cp.complex64)
end = time.monotonic() + a.seconds
t_ready = time.monotonic()
step = 0
while (step < a.steps) if a.steps else (time.monotonic() < end):
    spec = cp.fft.rfft(sig)
    filt = cp.fft.irfft(spec * mask, n=a.n)
    sig = 0.9 * sig + 0.1 * cp.tanh(filt)
    energy = cp.sum(sig * sig)
    step += 1
    if step == 3:
        cp.cuda.Device().synchronize()
        t_ready = time.monotonic()
        print("ready", flush=True)  # warmed up: the harness captures from here
    if step % 100 == 0:
        cp.cuda.Device().synchronize()
cp.cuda.Device().synchronize()
step_ms = 1e3 * (time.monotonic() - t_ready) / max(1, step - 3)  # steady steps, after warm-up
print(f"result steps={step} step_ms={step_ms:.4f} energy={float(energy):.4f}", flush=True)
