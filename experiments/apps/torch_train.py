"""PyTorch training, unmodified user code (no hybridsync, no CUDA flags): a
small MLP block with LayerNorm, forward, backward, Adam step and
loss.item() per step. Usage: python3 torch_train.py [--seconds S | --steps N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop only)."""
import argparse

import torch

import userloop


def build(batch=64):
    """Returns the step function (imported by inproc.py)."""
    d = 256
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d),
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d),
        torch.nn.Linear(d, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, d, device="cuda")
    t = torch.randint(0, 10, (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), t)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    userloop.run_standalone("torch_train", build(a.batch), a, 50, dict)  # warm-up: 50 steps


if __name__ == "__main__":
    main()
