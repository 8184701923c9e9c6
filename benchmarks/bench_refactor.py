"""A refactor's speed: the flagship before (a git revision) and after (this tree), in alternating
processes, as docs/engine-speed.md's issue-49 section measures it.

    python -m benchmarks.bench_refactor --old df34816 --devices 1 2 4 --rounds 7

The old revision is unpacked with `git archive` into a temporary folder and put first on
PYTHONPATH for its processes. Each process loads the graph, runs `regal.optimize` (flagship,
`--budget` evaluations, one Numba thread, seed 0) once to warm up, then `--repeats` times, and
reports the median CPU time of those runs; a round runs old and new once each, alternating which
goes first. Prints, per device count, the medians over rounds and their ratio (after / before)
and the median of the rounds' paired ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

GRAPH = "data/graphs/real/vit_l8_d256_b32_fwd_pre.json.gz"

CHILD = r"""
import sys, time, statistics
import numba
import regal
numba.set_num_threads(1)
g = regal.load(sys.argv[1])
d, budget, repeats = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
regal.optimize(g, devices=d, budget=budget, seed=0)
times = []
for _ in range(repeats):
    t = time.process_time()
    regal.optimize(g, devices=d, budget=budget, seed=0)
    times.append(time.process_time() - t)
print(statistics.median(times))
"""


def _run(tree: str, d: int, budget: int, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(tree, GRAPH), str(d), str(budget), str(repeats)],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_refactor", description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="git revision before the refactor")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=int, default=5000)
    args = p.parse_args(argv)
    new = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as old:
        archive = subprocess.run(["git", "-C", new, "archive", args.old], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        print(f"old {args.old}, new {new}; flagship, {args.budget:,} evaluations, one thread; "
              f"{args.rounds} rounds of a median of {args.repeats}")
        print("| d | before (s) | after (s) | after / before (medians) | paired (median of rounds) |")
        print("|---:|---:|---:|---:|---:|")
        for d in args.devices:
            before, after = [], []
            for r in range(args.rounds):
                pair = [(old, before), (new, after)]
                for tree, got in (pair if r % 2 == 0 else pair[::-1]):
                    got.append(_run(tree, d, args.budget, args.repeats))
            b, a = statistics.median(before), statistics.median(after)
            paired = statistics.median(x / y for x, y in zip(after, before))
            print(f"| {d} | {b:.3f} | {a:.3f} | {a / b:.3f} | {paired:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
