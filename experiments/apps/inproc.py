"""The suite's Python programs under CUDA's two wait modes and
libhybridsync, alternated inside one process.

Separate processes of the same program run far further apart than the
2-3% the targets ask about (docs/tried.md: "Separate processes per
arm"), and pairing runs by
repetition does not remove a per-process factor. Inside one process it cancels: each round runs the three arms
back to back, for --epoch-s each, in a balanced order: round r takes the
(r mod 6)-th of the six orders of three arms, so that over 6k rounds each
arm runs in each place equally often (and, within the rounds, right after
each other arm equally often).
(A fixed shuffled order, the same in every process, left an A/A control,
the default arm against itself, as far apart as the targets' margin: an
arm's place in the round matters; docs/BENCHMARKS.md, "The method's
resolution: an A/A control" and docs/tried.md, "A fixed arm order".)

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
"cpu_s", "slice_ns", "cpu_busy_s"}, CPU being the whole process's (the
library's own threads included), slice_ns the main thread's EEVDF slice
in the arm, cpu_busy_s how long its CPU was busy (cpu_busy; absent
unless the process is pinned to one CPU).
APPS_INPROC_UNMITIGATED=a,b,... names arms that run without the agent's
short slice (vgpu-probe apps --mitigate-arms; Slices says how). The C
programs do the same with --inproc (loop.h)."""
import argparse
import ctypes
import errno
import importlib
import itertools
import json
import os
import platform
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
# product arms (experiments/apps/suite.Arms): libhybridsync/ctest's
# TestInProcessArmTablesAgree checks all three.
ARM_SETUP = {"cuda-default": (0, False), "cuda-blocking": (0, True), "hybridsync": (HOOK_ALL, False),
             "hooks-observe": (HOOK_OBSERVE, False), "cuda-default-again": (0, False)}
CU_CTX_SCHED_MASK = 0x07
CU_CTX_SCHED_BLOCKING_SYNC = 0x04


class SchedAttr(ctypes.Structure):
    """The kernel's struct sched_attr (sched_setattr(2))."""
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("prio", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64),
                ("util_min", ctypes.c_uint32), ("util_max", ctypes.c_uint32)]


# sched_setattr, sched_getattr by machine.
SCHED_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}


class Slices:
    """The threads' EEVDF slices (sched_attr.sched_runtime), as loop.h's
    inproc_unmitigate: an arm without mitigation gives every thread of the
    process the kernel's default slice at its start and back what each had
    at its end, inside a process the agent mitigates (vgpu-probe apps
    --with-agent --mitigate ... --mitigate-arms), so that its time is what
    the program gets without the agent, beside arms that keep the slice.
    Policy, nice value and reset-on-fork are kept, as agent/mitigate does;
    SCHED_IDLE and real-time threads are left alone; a thread started
    inside the arm keeps what it inherits."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        self.set_nr, self.get_nr = SCHED_SYSCALLS.get(platform.machine(), (None, None))
        self.taken = []

    def get(self, tid):
        a = SchedAttr()
        if self.get_nr is None or self.libc.syscall(self.get_nr, tid, ctypes.byref(a), ctypes.sizeof(a), 0) != 0:
            raise OSError(ctypes.get_errno() or errno.ENOSYS, "sched_getattr")
        return a

    def set(self, tid, runtime):
        """Sets tid's sched_runtime (0: the default); returns what it had."""
        a = self.get(tid)
        was = a.runtime
        if a.policy in (0, 3):  # SCHED_OTHER, SCHED_BATCH
            a.size, a.flags = ctypes.sizeof(a), a.flags & 0x01  # SCHED_FLAG_RESET_ON_FORK
            a.runtime, a.deadline, a.period = runtime, 0, 0
            if self.libc.syscall(self.set_nr, tid, ctypes.byref(a), 0) != 0:
                raise OSError(ctypes.get_errno(), "sched_setattr")
        return was

    def own(self):
        """The calling thread's slice, 0 where it cannot be read."""
        try:
            return self.get(0).runtime
        except OSError:
            return 0

    def unmitigate(self):
        for tid in (int(t) for t in os.listdir("/proc/self/task")):
            try:
                self.taken.append((tid, self.set(tid, 0)))
            except OSError as e:
                if e.errno != errno.ESRCH:  # a thread that ended meanwhile is no failure
                    raise

    def remitigate(self):
        taken, self.taken = self.taken, []
        for tid, runtime in taken:
            try:
                self.set(tid, runtime)
            except OSError as e:
                if e.errno != errno.ESRCH:
                    raise


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


def cpu_busy():
    """Seconds the one CPU this process may run on has been busy
    (/proc/stat: user, nice, system, irq, softirq; steal is the host's),
    None where it may run on several or it cannot be read; as loop.h's
    inproc_cpu_busy, which says what a round's growth of it tells."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) != 1:
        return None
    want = "cpu%d" % next(iter(cpus))
    try:
        with open("/proc/stat") as f:
            for line in f:
                w = line.split()
                if w and w[0] == want:
                    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in w[1:8])
                    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    return None


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

    unmitigated = [x for x in os.environ.get("APPS_INPROC_UNMITIGATED", "").split(",") if x]
    slices = Slices()

    def enter(arm):
        hooks, blocking = ARM_SETUP[arm]
        ctx.blocking(blocking)
        if arm in unmitigated:
            try:
                slices.unmitigate()
            except OSError as e:
                sys.exit("inproc.py: APPS_INPROC_UNMITIGATED: %s" % e)
        if hooks:
            interpose(hooks)

    def leave():
        interpose(0)
        ctx.blocking(False)
        try:
            slices.remitigate()
        except OSError as e:
            sys.exit("inproc.py: giving back the slices: %s" % e)

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
            busy0 = cpu_busy()
            t0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - t0 < a.epoch_s:
                step()
                n += 1
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            busy1, slice_ns = cpu_busy(), slices.own()
            leave()
            rec = {"round": r, "arm": arm, "steps": n, "wall_s": round(wall, 6), "cpu_s": round(cpu, 6), "slice_ns": slice_ns}
            if busy0 is not None and busy1 is not None:
                rec["cpu_busy_s"] = round(busy1 - busy0, 2)
            rounds.append(rec)
    interpose(HOOK_ALL)
    print(json.dumps({"program": a.module, "steps": sum(x["steps"] for x in rounds),
                      "wall_s": round(sum(x["wall_s"] for x in rounds), 6),
                      "cpu_s": round(sum(x["cpu_s"] for x in rounds), 6), "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()
