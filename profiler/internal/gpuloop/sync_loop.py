"""A NAMD-like synchronization-intensive loop on a real GPU (PyTorch).

Per step: ~HOST_US of CPU work, one kernel of ~KERNEL_US (a matrix
product sized to take that long), then wait for it with
torch.cuda.synchronize(), which spins (cudaDeviceScheduleAuto with fewer
contexts than CPUs). Prints kernels/s once a second, so that the effect of
a co-runner sharing its CPU shows next to NVML's utilisation.

    taskset -c 15 python3 sync_loop.py SECONDS
"""
import sys
import time

import torch

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30
HOST_US = 200
KERNEL_US = 500

dev = torch.device("cuda")
n = 1024
a = torch.randn(n, n, device=dev)
b = torch.randn(n, n, device=dev)
# Size the product so one kernel takes about KERNEL_US.
for _ in range(20):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    per = (time.perf_counter() - t) / 10
    if abs(per - KERNEL_US / 1e6) < 0.1 * KERNEL_US / 1e6:
        break
    n = max(256, int(n * (KERNEL_US / 1e6 / per) ** (1 / 3)))
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
print(f"matrix {n}x{n}: {per * 1e6:.0f} us per kernel", flush=True)

end = time.time() + SECONDS
tick = time.time() + 1
steps = 0
while time.time() < end:
    t = time.perf_counter()
    while time.perf_counter() - t < HOST_US / 1e6:
        pass
    a @ b
    torch.cuda.synchronize()
    steps += 1
    if time.time() >= tick:
        print(f"{time.time():.3f} kernels/s {steps}", flush=True)
        steps = 0
        tick += 1
