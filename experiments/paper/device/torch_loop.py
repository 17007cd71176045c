"""A PyTorch loop (no hybridsync code): per step, CPU work, one GPU kernel of
about KERNEL_US (torch.cuda._sleep), an event record and event.synchronize().
PyTorch links libcudart dynamically, so under LD_PRELOAD=libhybridsync.so
its waits are replaced through the runtime path.
Usage: python3 torch_loop.py STEPS HOST_US KERNEL_US; prints JSON."""
import json
import resource
import sys
import time

import torch

steps, host_us, kernel_us = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
torch.cuda.init()
# Cycles per µs for _sleep: time a long sleep once.
torch.cuda._sleep(1000)
torch.cuda.synchronize()
t = time.perf_counter()
torch.cuda._sleep(20_000_000)
torch.cuda.synchronize()
cycles_per_us = 20_000_000 / ((time.perf_counter() - t) * 1e6)
cycles = int(kernel_us * cycles_per_us)
ev = torch.cuda.Event()


def spin(n):
    x = 1
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


# A fixed amount of CPU work per step (not of wall time): the fastest of
# several rounds sets it, as the Go benchmark does.
best = min(_timed for _timed in (
    (lambda t: (spin(20000), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(15)))
units = max(1, int(20000 * host_us * 1e-6 / best))


def work(_us):
    spin(units)


ru0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
for i in range(steps):
    work(host_us)
    torch.cuda._sleep(cycles)
    ev.record()
    ev.synchronize()
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": round(wall, 4), "cpu_s": round(ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime, 4), "torch": torch.__version__,
                  "cycles_per_us": round(cycles_per_us, 1)}))
