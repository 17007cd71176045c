"""PyTorch inference, unmodified user code (no hybridsync, no CUDA flags):
8 small Linear+GELU layers at a small batch, so each kernel takes 5-50 µs;
per step a forward pass, torch.cuda.synchronize() and one host read
(.item()). Usage: python3 torch_infer.py [--seconds S | --steps N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop only)."""
import argparse
import json
import sys
import time

import torch


def build(batch=32):
    """Returns the step function (imported by inproc.py)."""
    dims = [256, 384, 512, 512, 384, 512, 256, 384, 256]
    layers = []
    for i in range(8):
        layers += [torch.nn.Linear(dims[i], dims[i + 1]), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda().eval()
    x = torch.randn(batch, dims[0], device="cuda")

    def step():
        with torch.inference_mode():
            y = model(x)
            torch.cuda.synchronize()
            return y[0, 0].item()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    step = build(a.batch)
    print("apps: ready", file=sys.stderr, flush=True)  # set up: vgpu-probe apps applies the contention now

    for _ in range(200):  # warm-up: allocator, cuBLAS handles, lazy module loading
        step()

    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while True:
        step()
        n += 1
        if (a.steps and n >= a.steps) or (not a.steps and time.perf_counter() - t0 >= a.seconds):
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"program": "torch_infer", "steps": n, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6)}), flush=True)


if __name__ == "__main__":
    main()
