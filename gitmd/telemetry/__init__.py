"""GPU telemetry: one backend base class (NVML, ROCm SMI, simulated) and the periodic sampler."""
