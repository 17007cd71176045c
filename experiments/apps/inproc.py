"""The suite's Python programs under CUDA's two wait modes and
libhybridsync, alternated inside one process.

Separate processes of the same program run far further apart than the
2-3% the targets ask about (docs/BENCHMARKS.md, "What we tried that did
not work, and why": "Separate processes per arm"), and pairing runs by
repetition does not remove a per-process factor. Inside one process it cancels: each round runs the three arms
back to back, for --epoch-s each, in a balanced order: round r takes the
(r mod 6)-th of the six orders of three arms, so that over 6k rounds each
arm runs in each place equally often (and, within the rounds, right after
each other arm equally often).
(A fixed shuffled order, the same in every process, left an A/A control,
the default arm against itself, as far apart as the targets' margin: an
arm's place in the round matters; docs/BENCHMARKS.md, "The method's
resolution: an A/A control" and, under "What we tried that did not work,
and why", "A fixed arm order".)

  cuda-default   the library's hooks off (hs_interpose(0)): every CUDA call
                 goes straight through, with the context's own schedule
  cuda-blocking  hooks off, the context switched to
                 CU_CTX_SCHED_BLOCKING_SYNC (cuCtxSetFlags), as
                 cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) and
                 the suite's blocksync.so set it
  hybridsync     hooks on, the context's own schedule: the library in its
                 default mode, whose epochs pause while its hooks are off

The step functions are the suite's programs' own, imported unchanged
(each program module's build() returns its step).
Run under LD_PRELOAD=libhybridsync.so (vgpu-probe apps does that for a
suite entry with "in_process": true, and applies the contention):

  python3 inproc.py MODULE [--rounds R] [--epoch-s S]

MODULE: torch_infer, torch_train, cupy_stencil, torch_infer_host,
torch_train_dataprep, torch_two_threads, or any module on PYTHONPATH
with a build() (the last three take their host share from
$APPS_HOST_SHARE). Prints one JSON line: the whole process's
steps, wall and CPU seconds (as every suite program does), and "rounds":
one record per arm and round, {"round", "arm", "steps", "wall_s",
"cpu_s"}, CPU being the whole process's (the library's own threads
included). The C programs do the same with --inproc (loop.h)."""
import argparse
import ctypes
import importlib
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# hs_interpose's hook sets: HS_HOOK_OBSERVE and HS_HOOK_ALL of
# libhybridsync/include/hybridsync.h.
HOOK_OBSERVE, HOOK_ALL = 1, 3
ARMS = ["cuda-default", "cuda-blocking", "hybridsync"]
# Every arm: the library's hooks (hs_interpose's set), and whether the
# context is switched to blocking-sync. APPS_INPROC_ARMS=a,b,... picks
# others than ARMS, as for the C programs (loop.h, experiments/apps/diag/arms.sh).
# The same table as loop.h's, ARMS its default arms and the suite's
# product arms (experiments/suite.Arms): libhybridsync/ctest's
# TestInProcessArmTablesAgree checks all three.
ARM_SETUP = {"cuda-default": (0, False), "cuda-blocking": (0, True), "hybridsync": (HOOK_ALL, False),
             "hooks-observe": (HOOK_OBSERVE, False), "cuda-default-again": (0, False)}
CU_CTX_SCHED_MASK = 0x07
CU_CTX_SCHED_BLOCKING_SYNC = 0x04


class Context:
    """The current CUDA context's schedule, switched through the driver."""

    def __init__(self):
        cu = ctypes.CDLL("libcuda.so.1")
        self.set_flags = cu.cuCtxSetFlags
        self.set_flags.argtypes = [ctypes.c_uint]
        ctx, flags = ctypes.c_void_p(), ctypes.c_uint()
        if cu.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
            sys.exit("inproc.py: no current CUDA context after the program's set-up")
        if cu.cuCtxGetFlags(ctypes.byref(flags)) != 0:
            sys.exit("inproc.py: cuCtxGetFlags failed")
        self.own = flags.value

    def blocking(self, on):
        f = (self.own & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_BLOCKING_SYNC if on else self.own
        if self.set_flags(f) != 0:
            sys.exit("inproc.py: cuCtxSetFlags(%#x) failed" % f)


def main():
    p = argparse.ArgumentParser(description="CUDA's two wait modes and libhybridsync, alternated inside one process")
    p.add_argument("module", help="a module whose build() returns the step function: torch_infer, torch_train, cupy_stencil")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--epoch-s", type=float, default=0.3, help="seconds of each arm per round")
    a = p.parse_args()
    if a.rounds < 1 or a.epoch_s <= 0:
        sys.exit("inproc.py: --rounds and --epoch-s must be positive")
    try:
        interpose = ctypes.CDLL(None).hs_interpose
    except AttributeError:
        sys.exit("inproc.py: hs_interpose not found: run it under LD_PRELOAD=libhybridsync.so")
    interpose.argtypes = [ctypes.c_int]

    try:
        build = importlib.import_module(a.module).build
    except (ImportError, AttributeError) as e:
        sys.exit("inproc.py: %s: no build(): %s" % (a.module, e))
    arms = [x for x in os.environ.get("APPS_INPROC_ARMS", "").split(",") if x] or ARMS
    if any(x not in ARM_SETUP for x in arms):
        sys.exit("inproc.py: APPS_INPROC_ARMS: want arms among %s" % ", ".join(ARM_SETUP))
    step = build()
    step()  # compiles and loads the kernels: start-up
    ctx = Context()

    def enter(arm):
        hooks, blocking = ARM_SETUP[arm]
        ctx.blocking(blocking)
        if hooks:
            interpose(hooks)

    def leave():
        interpose(0)
        ctx.blocking(False)

    print("apps: ready", file=sys.stderr, flush=True)  # vgpu-probe apps applies the contention now
    leave()
    for _ in range(2):  # warm-up in each arm; the library learns the kernels
        for arm in arms:
            enter(arm)
            for _ in range(50):
                step()
            leave()

    rounds, orders = [], list(itertools.permutations(arms))
    for r in range(a.rounds):
        for arm in orders[r % len(orders)]:
            enter(arm)
            step()  # the switch settles outside the timed part
            n = 0
            t0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < a.epoch_s:
                step()
                n += 1
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            leave()
            rounds.append({"round": r, "arm": arm, "steps": n, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6)})
    interpose(HOOK_ALL)
    print(json.dumps({"program": a.module, "steps": sum(x["steps"] for x in rounds),
                      "wall_s": round(sum(x["wall_s"] for x in rounds), 6),
                      "cpu_s": round(sum(x["cpu_s"] for x in rounds), 6), "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()
