"""PyTorch inference, unmodified user code (no hybridsync, no CUDA flags):
8 small Linear+GELU layers at a small batch, so each kernel takes 5-50 µs;
per step a forward pass, torch.cuda.synchronize() and one host read
(.item()). Usage: python3 torch_infer.py [--seconds S | --steps N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop only)."""
import argparse

import torch

import userloop


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
    # warm-up: allocator, cuBLAS handles, lazy module loading
    userloop.run_standalone("torch_infer", build(a.batch), a, 200, dict)


if __name__ == "__main__":
    main()
