"""What each of the interposer's hooks costs a CuPy program, measured
inside one process: the speed of separate processes varies more than the
cost itself (docs/tried.md: "Separate processes per arm"), so the hooks are switched
(hs_interpose, exported by libhybridsync.so) between short epochs of the
same process, in a shuffled order each round.
Run under LD_PRELOAD=libhybridsync.so (and taskset, a co-runner, ... as
the case to measure needs):
  python3 hook_cost.py [--workload W] [--rounds R] [--steps S] [--n N]
Workloads: stencil (cupy_stencil.py's step), launch (one empty kernel
launch, no wait), sync (a synchronize of a stream whose work is done),
mixed (8 empty launches and a synchronize).
Prints one JSON line: per hook set (off, launches, waits, all), the median
wall and CPU µs per step over the rounds, and the median over rounds of
its wall time over the same round's "off"."""
import argparse
import ctypes
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cupy as cp  # noqa: E402
from cupy_stencil import build as stencil  # noqa: E402

SETS = {"off": 0, "launches": 1, "waits": 2, "all": 3}

p = argparse.ArgumentParser()
p.add_argument("--workload", choices=["stencil", "launch", "sync", "mixed"], default="stencil")
p.add_argument("--rounds", type=int, default=40)
p.add_argument("--steps", type=int, default=200, help="steps per epoch")
p.add_argument("--n", type=int, default=512)
a = p.parse_args()

try:
    interpose = ctypes.CDLL(None).hs_interpose
except AttributeError:
    sys.exit("hook_cost.py: hs_interpose not found: run it under LD_PRELOAD=libhybridsync.so")
interpose.argtypes = [ctypes.c_int]


def micro(kind):
    k = cp.RawKernel(r'extern "C" __global__ void nop(int x) {}', "nop")
    s = cp.cuda.Stream(non_blocking=True)
    arg = (cp.int32(0),)

    def launch():
        with s:
            k((1,), (32,), arg)

    def mixed():
        with s:
            for _ in range(8):
                k((1,), (32,), arg)
        s.synchronize()
    return {"launch": launch, "sync": s.synchronize, "mixed": mixed}[kind]


step = stencil(a.n) if a.workload == "stencil" else micro(a.workload)
for _ in range(300):  # compile, warm up, and let the policy learn the kernels
    step()



def switches():
    """Context switches so far: of this thread, and of the whole process
    (the library's Go runtime threads share a pinned program's CPU)."""
    def count(path):
        with open(path) as f:
            return sum(int(l.split()[1]) for l in f if "ctxt_switches" in l)
    own = count("/proc/thread-self/status")
    every = sum(count(f"/proc/self/task/{t}/status") for t in os.listdir("/proc/self/task"))
    return own, every


wall = {k: [] for k in SETS}
cpu = {k: [] for k in SETS}
own_sw = {k: 0 for k in SETS}
all_sw = {k: 0 for k in SETS}
secs = {k: 0.0 for k in SETS}
rng = random.Random(1)
for _ in range(a.rounds):
    order = list(SETS)
    rng.shuffle(order)
    for name in order:
        interpose(SETS[name])
        o0, a0 = switches()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(a.steps):
            step()
        dt = time.perf_counter() - t0
        o1, a1 = switches()
        own_sw[name] += o1 - o0
        all_sw[name] += a1 - a0
        secs[name] += dt
        wall[name].append(dt / a.steps * 1e6)
        cpu[name].append((time.process_time() - c0) / a.steps * 1e6)
interpose(SETS["all"])

out = {}
for name in SETS:
    ratios = [w / o for w, o in zip(wall[name], wall["off"])]
    out[name] = {"wall_us": round(statistics.median(wall[name]), 2),
                 "cpu_us": round(statistics.median(cpu[name]), 2),
                 "vs_off": round(statistics.median(ratios), 4),
                 "vs_off_min": round(min(ratios), 4), "vs_off_max": round(max(ratios), 4),
                 "switches_per_s": round(own_sw[name] / secs[name]),
                 "process_switches_per_s": round(all_sw[name] / secs[name])}
print(json.dumps({"workload": a.workload, "rounds": a.rounds, "steps": a.steps, **out}), flush=True)
