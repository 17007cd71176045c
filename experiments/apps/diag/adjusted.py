"""Arms of separate processes compared for the speed of each process's CPU.

On the GPU machine (itself a VM) one mdrun runs up to 1.5x slower than the
next with the same input and no library: every CPU-side activity of its
log (update, constraints, pair search) takes longer by one factor, which
holds for the process's life. Step times of separate processes then differ
by far more than any wait policy changes them. gromacs.py reports CPU-side
work with no wait inside it as host_s (mdrun's update and constraints, or
its pair search with the update on the GPU); this script fits, over every
run of a program and setting,

    log(wall per step) = arm's level + slope * log(host_s per step)

(one slope shared by the arms) and gives each arm's level against the
base arm's (--base), with a 95% interval from resampling the suite's reps (a rep
keeps its arms together). A level is the step time at the same CPU speed.
It also gives each arm's median host_s per step: an arm that slowed the
CPU-side work itself (its cache, its threads) would show there, and the
adjustment would hide it.

  python3 adjusted.py RUNS.jsonl [--base ARM] [--boot N] [--seed S]

RUNS.jsonl is the suite's runs.jsonl (vgpu-probe apps); runs without
host_s, failed runs and in-process rounds are left out. One line per
program, setting and arm on stdout.
"""
import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict


class Failure(Exception):
    pass


def load(path):
    """Cells: (program, contention) -> rep -> arm -> (y, x), the logs of wall
    and host seconds per step."""
    cells = defaultdict(lambda: defaultdict(dict))
    try:
        f = open(path)
    except OSError as e:
        raise Failure("%s: %s" % (path, e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                if r.get("exit_status", 0) != 0 or r.get("round") or not r.get("host_s") or r.get("steps", 0) <= 0:
                    continue
                steps = r["steps"]
                y, x = math.log(r["wall_s"] / steps), math.log(r["host_s"] / steps)
                cells[(r["program"], r["contention"])][r["rep"]][r["arm"]] = (y, x)
            except (ValueError, KeyError, TypeError, ZeroDivisionError) as e:
                raise Failure("%s:%d: not a run of the suite (%s)" % (path, n, e))
    if not cells:
        raise Failure("%s: no run with host_s (gromacs.py's programs give it)" % path)
    return cells


def fit(reps, arms):
    """The shared slope and each arm's level at the mean host time."""
    by_arm = {a: [reps[r][a] for r in reps if a in reps[r]] for a in arms}
    sxy = sxx = 0.0
    for pts in by_arm.values():
        my = statistics.fmean(p[0] for p in pts)
        mx = statistics.fmean(p[1] for p in pts)
        sxy += sum((p[0] - my) * (p[1] - mx) for p in pts)
        sxx += sum((p[1] - mx) ** 2 for p in pts)
    slope = sxy / sxx if sxx > 0 else 0.0
    xbar = statistics.fmean(p[1] for pts in by_arm.values() for p in pts)
    level = {a: statistics.fmean(p[0] - slope * (p[1] - xbar) for p in pts) for a, pts in by_arm.items()}
    return slope, level


def compare(reps, base, boot, rng):
    arms = sorted({a for r in reps.values() for a in r}, key=lambda a: (a != base, a))
    if base not in arms:
        raise Failure("no run of the base arm %s" % base)
    if any(sum(a in r for r in reps.values()) < 3 for a in arms):
        raise Failure("an arm with fewer than 3 runs: nothing to fit")
    slope, level = fit(reps, arms)
    keys = list(reps)
    draws = defaultdict(list)
    for _ in range(boot):
        sample = {i: reps[rng.choice(keys)] for i in range(len(keys))}
        if any(sum(a in r for r in sample.values()) < 2 for a in arms):
            continue
        _, lv = fit(sample, arms)
        for a in arms:
            draws[a].append(math.exp(lv[a] - lv[base]) - 1)
    out = []
    for a in arms:
        pts = [reps[r][a] for r in reps if a in reps[r]]
        d = sorted(draws[a])
        lo, hi = (d[int(0.025 * len(d))], d[int(0.975 * len(d)) - 1]) if d else (0.0, 0.0)
        raw = statistics.median(math.exp(p[0]) for p in pts)
        host = statistics.median(math.exp(p[1]) for p in pts)
        out.append((a, len(pts), raw * 1e6, host * 1e6, math.exp(level[a] - level[base]) - 1, lo, hi))
    return slope, out


def main(argv=None):
    p = argparse.ArgumentParser(prog="adjusted.py", description=__doc__.split("\n")[0])
    p.add_argument("runs")
    p.add_argument("--base", default="cuda-default", help="the arm the others are compared with")
    p.add_argument("--boot", type=int, default=2000, help="resamples for the intervals")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    try:
        if a.boot < 100:
            raise Failure("--boot %d: want at least 100" % a.boot)
        cells = load(a.runs)
        rng = random.Random(a.seed)
        for (prog, cont), reps in sorted(cells.items()):
            slope, rows = compare(reps, a.base, a.boot, rng)
            for arm, n, raw, host, eff, lo, hi in rows:
                print("%s %s %s n=%d step_us=%.1f host_us=%.1f slope=%.2f adjusted_vs_%s=%+.1f%% [%+.1f,%+.1f]"
                      % (prog, cont, arm, n, raw, host, slope, a.base, eff * 100, lo * 100, hi * 100))
    except Failure as e:
        print("adjusted.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
