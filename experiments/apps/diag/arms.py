"""The table of experiments/apps/diag/arms.sh's results: per program,
setting and arm, the median over rounds of its wall time per step over
the same round's cuda-default, with the quartiles; then the same median
per process, which shows how far processes differ.

  python3 experiments/apps/diag/arms.py OUT/arms.jsonl [...]"""
import json
import statistics
import sys


def pct(x):
    return "%+.1f%%" % ((x - 1) * 100)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return "%s [%s,%s]" % (pct(q[1]), pct(q[0]), pct(q[2]))


def main():
    ratios = {}  # (program, setting, arm) -> proc -> [ratio per round]
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
                    if arm != "cuda-default" and r["steps"]:
                        x = (r["wall_s"] / r["steps"]) / (base["wall_s"] / base["steps"])
                        key = (rec["program"], rec["setting"], arm)
                        ratios.setdefault(key, {}).setdefault(rec.get("proc", 1), []).append(x)
    print("%-13s %-11s %-19s %4s  %-24s %s" % ("program", "setting", "arm", "n", "wall/default [IQR]", "per process"))
    for (prog, setting, arm), procs in ratios.items():
        xs = [x for v in procs.values() for x in v]
        per = " ".join(pct(statistics.median(v)) for v in procs.values())
        print("%-13s %-11s %-19s %4d  %-24s %s" % (prog, setting, arm, len(xs), quartiles(xs), per))


if __name__ == "__main__":
    main()
