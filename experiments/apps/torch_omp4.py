"""PyTorch training whose data preparation runs on the host as tensor ops
on 4 intra-op threads (torch.set_num_threads(4); --threads N), unmodified
user code (no hybridsync, no CUDA flags): per step a batch of 64 colour
images 32x32 from a fixed pool goes through `passes` rounds of a 3x3 box
blur, a brightness and contrast per image and a horizontal flip of about
half of them, then a normalisation per image and a 2x2 average pool of
the channels' mean down to 256 features, all on CPU tensors that
PyTorch splits over its intra-op threads (OpenMP parallel regions); the
batch is copied to the device and
torch_train_dataprep.py's model runs forward, backward and an Adam step,
then loss.item() (the step's wait).

Between two parallel regions the intra-op threads wait as the OpenMP
runtime makes them (GNU libgomp in PyTorch's Linux wheels: spin up to
GOMP_SPINCOUNT times, 300,000 by default, then sleep): while the main
thread launches and waits on the device, they spin on the CPUs it shares
with them. The program is meant to run on as many CPUs as threads
("cpus": 4 in suite.json).

The passes per batch are calibrated once, before "apps: ready", on one
thread and by that thread's CPU time, so that neither OpenMP's wait
settings nor a busy neighbour change the work: its CPU time per batch on
one thread is --threads x the time that would make --host-share of a
step alone (default 0.45), the share it takes when it spreads perfectly
over the threads; --host-units N fixes the passes instead.
Usage: python3 torch_omp4.py [--threads N] [--seconds S | --steps N] [--host-share F | --host-units N]
Prints one JSON line: {"program","steps","wall_s","cpu_s"} (timed loop
only; CPU of all threads) and "host_units" (passes per batch), "host_s"
(the preparation's seconds in the timed loop) and "threads" (intra-op
threads)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import userloop
from torch_train_dataprep import Trainer

DEFAULT_THREADS = 4


class TensorPrep:
    """The data preparation: CPU tensor ops over a whole batch, each
    spread over PyTorch's intra-op threads (tensors of 196,608 elements,
    six times PyTorch's grain of 32,768 for splitting a loop)."""

    def __init__(self, passes, batch, images=256, size=32, seed=5):
        g = torch.Generator().manual_seed(seed)
        self.pool = torch.randint(0, 256, (images, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (images,), generator=g)
        self.gen = torch.Generator().manual_seed(seed + 1)
        self.passes, self.batch, self.next = passes, batch, 0

    def prepare(self, idx):
        """The batch of those pool indices: (float32 (n, 256), int64 (n,))."""
        n, g = len(idx), self.gen
        x = self.pool.index_select(0, idx).float()
        for _ in range(self.passes):
            x = F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)
            scale = torch.empty(n, 1, 1, 1).uniform_(0.8, 1.2, generator=g)
            shift = torch.empty(n, 1, 1, 1).uniform_(-8.0, 8.0, generator=g)
            x = torch.addcmul(shift, x, scale)
            flip = torch.rand(n, 1, 1, 1, generator=g) < 0.5
            x = torch.where(flip, x.flip(3), x)
        x = (x - x.mean(dim=(2, 3), keepdim=True)) / (x.std(dim=(2, 3), keepdim=True) + 1e-6)
        x = F.avg_pool2d(x.mean(dim=1, keepdim=True), 2).reshape(n, -1)
        return x, self.labels.index_select(0, idx)

    def batch_of_next(self):
        idx = (self.next + torch.arange(self.batch)) % len(self.pool)
        self.next = (self.next + self.batch) % len(self.pool)
        return self.prepare(idx)


def median_thread_cpu(run, reps=9):
    """Median CPU seconds of the calling thread in run() over reps calls,
    after two untimed ones: on one intra-op thread PyTorch does the work
    in the calling thread."""
    run()
    run()
    ts = []
    for _ in range(reps):
        t = time.thread_time()
        run()
        ts.append(time.thread_time() - t)
    return statistics.median(ts)


def sized(tr, prep, threads, share, units):
    """The passes per batch (calibrated on one thread unless given), said
    on stderr."""
    if units:
        print("torch_omp4: %d passes per batch (--host-units)" % units, file=sys.stderr, flush=True)
        return units
    x, y = (t.cuda() for t in prep.batch_of_next())
    dev = userloop.device_seconds(lambda: tr.update(x, y))

    def make(passes):
        prep.passes = passes
        return prep.batch_of_next
    torch.set_num_threads(1)
    try:
        units = userloop.calibrate(make, dev * threads, share, start=2, measure=median_thread_cpu)
    finally:
        torch.set_num_threads(threads)
    print("torch_omp4: %d passes per batch for %.0f%% of a step alone on %d threads (device part %.1f µs)"
          % (units, share * 100, threads, dev * 1e6), file=sys.stderr, flush=True)
    return units


def setup(batch=64, share=None, units=None, threads=None):
    """The step and what the JSON line reports."""
    threads = threads or int(os.environ.get("APPS_THREADS", DEFAULT_THREADS))
    share, units = userloop.host_settings(share, units)
    torch.set_num_threads(threads)
    cpus = len(os.sched_getaffinity(0))
    if cpus < threads:
        print("torch_omp4: %d intra-op threads on %d CPUs" % (threads, cpus), file=sys.stderr, flush=True)
    tr = Trainer()
    prep = TensorPrep(0, batch)
    prep.passes = sized(tr, prep, threads, share, units)
    host = userloop.HostTimer()

    def step():
        x, y = host(prep.batch_of_next)
        return tr.update(x.cuda(), y.cuda()).item()
    return step, lambda: {"host_units": prep.passes, "host_s": host.s, "threads": torch.get_num_threads()}


def build():
    """Returns the step function (imported by inproc.py): the threads from
    $APPS_THREADS, the host share from $APPS_HOST_SHARE, or the defaults."""
    return setup()[0]


def main():
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    a, rest = pre.parse_known_args()
    if not 1 <= a.threads <= 256:
        userloop.die("torch_omp4.py: --threads %d: want 1 to 256" % a.threads)
    sys.argv[1:] = rest
    userloop.main("torch_omp4", lambda b, s, u: setup(b, s, u, a.threads), batch=64, warmup=50)


if __name__ == "__main__":
    main()
