"""The table of experiments/apps/diag/hook_tax.sh's results: per setting
and arm, the median over rounds of its wall time per step over the same
round's cuda-default, with the quartiles, and the same for CPU time.

  python3 experiments/apps/diag/hook_tax.py OUT/hook_tax.jsonl [...]"""
import json
import statistics
import sys


def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return "%+.1f%% [%+.1f,%+.1f]" % ((q[1] - 1) * 100, (q[0] - 1) * 100, (q[2] - 1) * 100)


def main():
    ratios = {}
    for path in sys.argv[1:]:
        for line in open(path):
            rec = json.loads(line)
            by_round = {}
            for r in rec["result"]["rounds"]:
                by_round.setdefault(r["round"], {})[r["arm"]] = r
            for arms in by_round.values():
                base = arms.get("cuda-default")
                if not base or not base["steps"]:
                    continue
                for arm, r in arms.items():
                    if arm == "cuda-default" or not r["steps"]:
                        continue
                    wall = (r["wall_s"] / r["steps"]) / (base["wall_s"] / base["steps"])
                    cpu = (r["cpu_s"] / r["steps"]) / (base["cpu_s"] / base["steps"])
                    ratios.setdefault((rec["setting"], arm), []).append((wall, cpu))
    print("%-11s %-14s %4s  %-24s %s" % ("setting", "arm", "n", "wall/default (IQR)", "cpu/default (IQR)"))
    for (setting, arm), xs in ratios.items():
        print("%-11s %-14s %4d  %-24s %s" % (setting, arm, len(xs), quartiles([w for w, _ in xs]),
                                             quartiles([c for _, c in xs])))


if __name__ == "__main__":
    main()
