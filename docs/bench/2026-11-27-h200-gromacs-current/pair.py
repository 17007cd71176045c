#!/usr/bin/env python3
"""Library with the agent against CUDA without it, run by run of the suite.

The suite cannot run an arm with and without the agent at once, so the two
were run alternately (four suite runs of each, `gromacs-device.sh suite
... --reps 3`, then the same with `--with-agent --hints --mitigate
slice=100us`). For each pair of suite runs this prints the library with the
agent over the better CUDA mode without it: median time per step of each.

    python3 pair.py while1-plain.runs.jsonl while1-agent.runs.jsonl
"""
import json
import statistics
import sys


def blocks(path):
    """The suite runs in a file of several, split where rep starts over."""
    out, last = [], None
    for line in open(path):
        r = json.loads(line)
        if last is None or r["rep"] < last:
            out.append({})
        last = r["rep"]
        out[-1].setdefault((r["program"], r["arm"]), []).append(r["wall_s"] / r["steps"] * 1e6)
    return [{k: statistics.median(v) for k, v in b.items()} for b in out]


plain, agent = blocks(sys.argv[1]), blocks(sys.argv[2])
for prog in sorted({p for b in plain for p, _ in b}):
    cells = []
    for p, a in zip(plain, agent):
        best = min(p[(prog, "cuda-default")], p[(prog, "cuda-blocking")])
        cells.append(a[(prog, "hybridsync")] / best - 1)
    print(f"{prog}: library + agent over the better CUDA mode without it: "
          + " ".join(f"{100 * c:+.1f}%" for c in cells)
          + f" (median {100 * statistics.median(cells):+.1f}%)")
