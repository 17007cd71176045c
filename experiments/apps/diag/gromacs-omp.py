"""The table of experiments/apps/diag/gromacs-omp.sh's runs: per setting
and arm, the median ns/day with its range, the median over repetitions of
the arm's ns/day over the same repetition's cuda-default, with a 95%
bootstrap interval, the CPU seconds a run, and the busy loops' share of
their CPUs.

  python3 experiments/apps/diag/gromacs-omp.py OUT/gromacs-omp.jsonl [...]"""
import json
import random
import statistics
import sys


def boot_ci(xs, n=2000, seed=1):
    """The 95% bootstrap interval of the median of xs."""
    if len(xs) < 2:
        return xs[0], xs[0]
    rnd = random.Random(seed)
    meds = sorted(statistics.median(rnd.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            for i, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit("gromacs-omp.py: %s:%d: not JSON: %s" % (path, i, e))
                if "ns_per_day" in r:
                    runs.append(r)
    return runs


def table(runs):
    rows = []
    for setting in sorted({r["setting"] for r in runs}):
        base = {r["rep"]: r["ns_per_day"] for r in runs if r["setting"] == setting and r["arm"] == "cuda-default"}
        for arm in sorted({r["arm"] for r in runs if r["setting"] == setting}):
            rs = [r for r in runs if r["setting"] == setting and r["arm"] == arm]
            nd = [r["ns_per_day"] for r in rs]
            ratios = [r["ns_per_day"] / base[r["rep"]] for r in rs if r["rep"] in base]
            row = {"setting": setting, "arm": arm, "n": len(rs), "ns_per_day": statistics.median(nd),
                   "min": min(nd), "max": max(nd), "cpu_s": statistics.median(r["cpu_s"] for r in rs)}
            if ratios:
                lo, hi = boot_ci(ratios)
                row.update(ratio=statistics.median(ratios), lo=lo, hi=hi)
            shares = [r["busy_share"] for r in rs if r.get("busy_share") is not None]
            if shares:
                row["busy_share"] = statistics.median(shares)
            rows.append(row)
    return rows


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    rows = table(load(sys.argv[1:]))
    if not rows:
        raise SystemExit("gromacs-omp.py: no runs with ns_per_day in %s" % " ".join(sys.argv[1:]))
    print("| setting | arm | n | ns/day median [min-max] | vs cuda-default [95% CI] | CPU s a run | busy loops' CPU |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = "%.2fx [%.2f, %.2f]" % (r["ratio"], r["lo"], r["hi"]) if "ratio" in r else "-"
        share = "%.0f%%" % (100 * r["busy_share"]) if "busy_share" in r else "-"
        print("| %s | %s | %d | %.0f [%.0f-%.0f] | %s | %.2f | %s |" % (
            r["setting"], r["arm"], r["n"], r["ns_per_day"], r["min"], r["max"], ratio, r["cpu_s"], share))


if __name__ == "__main__":
    main()
