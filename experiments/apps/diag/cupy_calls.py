"""What one CuPy call costs the host thread: a launch of an empty kernel
(no wait), and a synchronize of a stream whose work is done. Run it with
and without LD_PRELOAD=libhybridsync.so to see what the interposer adds
per call.
Usage: python3 cupy_calls.py [--n N]
Prints one JSON line: {"launch_ns","sync_ns","mixed_ns"} (medians of 5 batches of N)."""
import argparse
import json
import statistics
import time

import cupy as cp

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=20000)
a = p.parse_args()

k = cp.RawKernel(r'extern "C" __global__ void nop(int x) {}', "nop")
s = cp.cuda.Stream(non_blocking=True)


def launches(n):
    with s:
        for _ in range(n):
            k((1,), (32,), (cp.int32(0),))


def syncs(n):
    for _ in range(n):
        s.synchronize()


def mixed(n):  # the stencil's shape: 8 launches, one synchronize
    with s:
        for _ in range(n // 8):
            for _ in range(8):
                k((1,), (32,), (cp.int32(0),))
            s.synchronize()


def per_call(f):
    f(1000)
    s.synchronize()
    out = []
    for _ in range(5):
        t = time.perf_counter_ns()
        f(a.n)
        out.append((time.perf_counter_ns() - t) / a.n)
        s.synchronize()
    return round(statistics.median(out), 1)


print(json.dumps({"launch_ns": per_call(launches), "sync_ns": per_call(syncs), "mixed_ns": per_call(mixed)}))
