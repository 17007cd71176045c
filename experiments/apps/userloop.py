"""What the suite's user-loop programs share (torch_infer_host.py,
torch_train_dataprep.py, torch_two_threads.py): their host work in pure
Python and NumPy, importable without torch (test_userloop.py tests it);
its calibration to a share of a step; the side thread of
torch_two_threads.py; and their standalone run (main: the flags, then
run_standalone: the timed loop and its JSON line, which the suite's other
Python programs run too).

The host work is sized in units (words per request for the text
pipeline, augmentation ops per batch for the image pipeline), calibrated
once per process, before "apps: ready", so that it takes a given share of
a step alone: host / (host + device) = --host-share (default 0.45). The
device part is timed on the GPU with CUDA events around launches that
contain no wait, so that the calibration comes out the same under every
wait mode: in separate processes of the arms (suite.json) the blocking
arm's wake-ups would otherwise buy it more host work. --host-units N
fixes the units instead (the JSON line reports the units used)."""
import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time
import zlib

import numpy as np

DEFAULT_SHARE = 0.45
MAX_SHARE = 0.9
MAX_UNITS = 1 << 16


def die(msg):
    """Bad input: one line on stderr and exit status 2."""
    print(msg, file=sys.stderr, flush=True)
    sys.exit(2)


# --- the text pipeline (torch_infer_host.py) ---

def word_list(n=4096, seed=1):
    """n made-up lower-case words of 2-9 letters, the same in every process."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(letters[c] for c in rng.integers(0, 26, size=int(k))) for k in rng.integers(2, 10, size=n)]


def tokenise(texts, vocab, dim):
    """Pre-processing, as a bag-of-words model's: each text split into
    words, stripped of punctuation and lower-cased in pure Python, mapped
    to its vocabulary id or else hashed (crc32: the same in every process,
    unlike hash()), counted into dim features, log-scaled and normalised
    per row. Returns float32 (len(texts), dim)."""
    ids = []
    for row, t in enumerate(texts):
        base = row * dim
        for w in t.split():
            w = w.strip(".,;:!?").lower()
            i = vocab.get(w)
            if i is None:
                i = zlib.crc32(w.encode())
            ids.append(base + i % dim)
    counts = np.bincount(np.asarray(ids, dtype=np.intp), minlength=len(texts) * dim).reshape(len(texts), dim)
    x = np.log1p(counts.astype(np.float32))
    x -= x.mean(axis=1, keepdims=True)
    x /= x.std(axis=1, keepdims=True) + 1e-6
    return x


def decode(probs, labels, k=5):
    """Post-processing: each row's k most likely labels with their scores,
    best first, as a JSON response (a str)."""
    top = np.argpartition(probs, -k, axis=1)[:, -k:]
    scores = np.take_along_axis(probs, top, axis=1)
    order = np.argsort(-scores, axis=1)
    top = np.take_along_axis(top, order, axis=1).tolist()
    scores = np.take_along_axis(scores, order, axis=1).tolist()
    return json.dumps([{"request": i, "labels": [labels[j] for j in t], "scores": [round(s, 4) for s in sc]}
                       for i, (t, sc) in enumerate(zip(top, scores))])


class TextPipeline:
    """A batch of requests of `words` words each, tokenised before the
    model and decoded after it. The requests come in rotation from a pool
    of 64 texts (mixed case, punctuation, words out of the vocabulary)."""

    def __init__(self, words, batch, dim, labels, seed=2):
        ws = word_list()
        self.vocab = {w: i for i, w in enumerate(ws[:2048])}
        rng = np.random.default_rng(seed)
        self.texts = []
        for _ in range(64):
            t = [ws[i] for i in rng.integers(0, len(ws), size=words)]
            for j in rng.integers(0, words, size=words // 8):
                t[j] = t[j].capitalize() + rng.choice([",", ".", "!", "?"])
            self.texts.append(" ".join(t))
        self.batch, self.dim, self.labels, self.next = batch, dim, labels, 0

    def pre(self):
        """The next batch of requests, tokenised: float32 (batch, dim)."""
        texts = [self.texts[(self.next + i) % len(self.texts)] for i in range(self.batch)]
        self.next = (self.next + self.batch) % len(self.texts)
        return tokenise(texts, self.vocab, self.dim)

    def post(self, probs):
        return decode(probs, self.labels)


# --- the image pipeline (torch_train_dataprep.py, torch_two_threads.py) ---

def _flip(a, rng):
    return a[:, ::-1]


def _shift(a, rng):
    return np.roll(a, tuple(int(v) for v in rng.integers(-4, 5, size=2)), axis=(0, 1))


def _brightness(a, rng):
    return a * np.float32(rng.uniform(0.7, 1.3))


def _contrast(a, rng):
    m = a.mean()
    return (a - m) * np.float32(rng.uniform(0.7, 1.3)) + m


def _cutout(a, rng):
    a = a.copy()
    y, x = (int(v) for v in rng.integers(0, 24, size=2))
    a[y:y + 8, x:x + 8] = 0
    return a


def _noise(a, rng):
    return a + rng.normal(0, 8, size=a.shape).astype(np.float32)


def _rot90(a, rng):
    return np.rot90(a, int(rng.integers(1, 4)))


def _blur(a, rng):
    return (a + np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1)) / np.float32(5)


# RandAugment-like: each op takes and returns a float32 32x32 image.
OPS = [_flip, _shift, _brightness, _contrast, _cutout, _noise, _rot90, _blur]


class Augment:
    """Data preparation for training on 32x32 grey images with 10 classes
    (a fixed pool of 512 random ones): `ops` randomly chosen augmentation
    ops per batch, spread over its samples (ops // batch each, one more for
    the first ops % batch), then over the whole batch a 3x3 smoothing,
    normalisation and a 2x2 average pool to 256 features.

    The per-sample part is Python over small arrays: it holds the GIL. The
    whole-batch part is NumPy over 64K-element arrays, whose inner loops
    run without the GIL (NumPy releases it for loops over more than a few
    hundred elements of a plain dtype): torch_two_threads.py's preparer
    thread lets the launching thread run Python for part of its time.

    sample() (the sampler, in the launching thread) and prepare() (the
    preparer, in its own thread in torch_two_threads.py) touch disjoint
    state: each has its own position or generator."""

    def __init__(self, ops, batch, images=512, seed=3):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(images, 32, 32), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=images).astype(np.int64)
        self.ops, self.batch, self.next = ops, batch, 0
        self.rng = np.random.default_rng(seed + 1)

    def sample(self):
        """The next batch's indices into the pool."""
        idx = (self.next + np.arange(self.batch)) % len(self.images)
        self.next = (self.next + self.batch) % len(self.images)
        return idx

    def prepare(self, idx):
        """The batch of those indices: (float32 (n, 256), int64 (n,))."""
        n = len(idx)
        out = self.images[idx].astype(np.float32)
        per, extra = divmod(self.ops, n)
        choices = self.rng.integers(0, len(OPS), size=self.ops).tolist()
        for k in range(min(n, self.ops)):
            a = out[k]
            for j in choices[k * per + min(k, extra):(k + 1) * per + min(k + 1, extra)]:
                a = OPS[j](a, self.rng)
            out[k] = a
        # 3x3 box smoothing, separable: whole-batch loops, without the GIL.
        p = np.pad(out, ((0, 0), (1, 1), (1, 1)), mode="edge")
        p = p[:, :-2] + p[:, 1:-1] + p[:, 2:]
        out = (p[:, :, :-2] + p[:, :, 1:-1] + p[:, :, 2:]) / np.float32(9)
        out -= out.mean()
        out /= out.std() + np.float32(1e-6)
        x = (out[:, ::2, ::2] + out[:, 1::2, ::2] + out[:, ::2, 1::2] + out[:, 1::2, 1::2]) * np.float32(0.25)
        return x.reshape(n, 256), self.labels[idx]

    def batch_of_next(self):
        return self.prepare(self.sample())


class Preparer:
    """torch_two_threads.py's side thread: it prepares the batch of each
    request the launching thread hands it, `depth` requests ahead (a
    DataLoader's prefetch), and hands the batches back in order. It makes
    no CUDA call: the launching thread alone does (the in-process harness
    switches the context's wait mode and the library's hooks between
    epochs from that thread, and a CUDA call from another thread would
    straddle the switch).

    The bounded handshake keeps it exactly `depth` batches ahead: between
    two epochs of the harness it finishes at most those, and every arm's
    epoch starts with the same head start. An exception in the thread is
    raised again by the next get()."""

    def __init__(self, prepare, sample, depth=2):
        self.prepare, self.sample = prepare, sample
        self.todo, self.ready = queue.Queue(), queue.Queue()
        self.host = HostTimer()  # written by the thread only
        self.wait = HostTimer()  # written by get()'s caller only
        for _ in range(depth):
            self.todo.put(self.sample())
        self.thread = threading.Thread(target=self._run, name="preparer", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while True:
                req = self.todo.get()
                if req is None:
                    return
                self.ready.put(self.host(self.prepare, req))
        except BaseException as e:  # handed to the launching thread, which stops
            self.ready.put(e)

    def get(self):
        """The next batch; hands the preparer the request `depth` after it."""
        b = self.wait(self.ready.get)
        if isinstance(b, BaseException):
            raise RuntimeError("preparer thread failed: %r" % b) from b
        self.todo.put(self.sample())
        return b

    def stop(self):
        self.todo.put(None)
        self.thread.join()


# --- calibration and the timed loop ---

class HostTimer:
    """Seconds spent in the calls made through it, so that a program can
    report what share of its steps the host work took. One thread per
    timer."""

    def __init__(self):
        self.s = 0.0

    def __call__(self, f, *args):
        t = time.perf_counter()
        try:
            return f(*args)
        finally:
            self.s += time.perf_counter() - t


def median_seconds(run, reps=9):
    """Median wall time of run() over reps calls, after two untimed ones."""
    run()
    run()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def calibrate(make, device_s, share, start=8, measure=median_seconds):
    """The units of host work that take `share` of a step alone with a
    device part of device_s: make(units) returns a callable doing one
    step's host work. The cost grows about linearly with the units from a
    fixed part, so scaling the units by target / measured converges (the
    error shrinks by fixed / target each time); where the fixed part alone
    exceeds the target, it settles at 1 unit."""
    target = share / (1 - share) * device_s
    units = start
    for _ in range(8):
        t = measure(make(units))
        nxt = max(1, min(MAX_UNITS, round(units * target / t))) if t > 0 else MAX_UNITS
        if nxt == units:
            break
        units = nxt
    return units


def device_seconds(part, reps=50):
    """Median GPU time of part(), between CUDA events recorded around it
    and read after it finished. part() must not wait on the device: then
    the time is the launches' and kernels' alone, the same under every
    wait mode. (torch is imported here so that this module imports
    without it.)"""
    import torch
    ts = []
    for _ in range(reps + 5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        part()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    return statistics.median(ts[5:])


def host_settings(share=None, units=None):
    """The host share and units: the flags' values, else APPS_HOST_SHARE
    and APPS_HOST_UNITS (for the in-process harness, which calls build()
    with no arguments), else DEFAULT_SHARE and calibration (units 0)."""
    if share is None:
        share = os.environ.get("APPS_HOST_SHARE", DEFAULT_SHARE)
    if units is None:
        units = os.environ.get("APPS_HOST_UNITS", 0)
    try:
        share, units = float(share), int(units)
    except ValueError:
        die("host share %r / units %r: want a number and an integer" % (share, units))
    if not 0 < share <= MAX_SHARE or not 0 <= units <= MAX_UNITS:
        die("host share %g / units %d: want 0 < share <= %g and 0 <= units <= %d" % (share, units, MAX_SHARE, MAX_UNITS))
    return share, units


def sized(name, what, make, device_part, share, units):
    """The units to use (calibrated unless given), said on stderr."""
    if units:
        print("%s: %d %s (--host-units)" % (name, units, what), file=sys.stderr, flush=True)
        return units
    dev = device_seconds(device_part)
    units = calibrate(make, dev, share)
    print("%s: %d %s for %.0f%% of a step alone (device part %.1f µs)" % (name, units, what, share * 100, dev * 1e6),
          file=sys.stderr, flush=True)
    return units


def parse_args(batch):
    """The flags every user-loop program takes, checked."""
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--host-share", type=float, default=None,
                   help="share of a step alone the host work takes (default $APPS_HOST_SHARE or %g)" % DEFAULT_SHARE)
    p.add_argument("--host-units", type=int, default=None,
                   help="fixed units of host work instead of calibrating (default $APPS_HOST_UNITS or 0: calibrate)")
    a = p.parse_args()
    if a.batch < 1 or a.seconds <= 0 or a.steps < 0:
        die("%s: --batch and --seconds must be positive, --steps at least 0" % p.prog)
    return a


def main(name, setup, batch, warmup):
    """A user-loop program run on its own: its flags (parse_args, batch
    the default --batch), its step and report from setup(batch,
    host_share, host_units), then run_standalone with warmup steps."""
    a = parse_args(batch)
    step, report = setup(a.batch, a.host_share, a.host_units)
    run_standalone(name, step, a, warmup, report)


def run_standalone(name, step, args, warmup, report):
    """The suite's standalone loop: "apps: ready", warm-up, then steps for
    --seconds or --steps, and one JSON line {"program","steps","wall_s",
    "cpu_s"} (timed loop only) with report()'s keys added, each a
    difference over the timed loop of a counter report() returns."""
    print("apps: ready", file=sys.stderr, flush=True)  # set up: vgpu-probe apps applies the contention now
    for _ in range(warmup):
        step()
    r0 = report()
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while True:
        step()
        n += 1
        if (args.steps and n >= args.steps) or (not args.steps and time.perf_counter() - t0 >= args.seconds):
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = {"program": name, "steps": n, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6)}
    for k, v in report().items():
        res[k] = round(v - r0[k], 6) if isinstance(v, float) else v
    print(json.dumps(res), flush=True)
