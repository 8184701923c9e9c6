"""A refactor's speed: the flagship (or one kernel a refactor changed) before (a git revision) and
after (this tree, or `--new` another revision), in alternating processes, as
docs/engine-speed.md's issue-49 section measures it.

    python -m benchmarks.bench_refactor --old df34816 --devices 1 2 4 --rounds 7
    python -m benchmarks.bench_refactor --old d31e652 --new acda099 --what greedy lpmf allocation

The old revision is unpacked with `git archive` into a temporary folder and put first on
PYTHONPATH for its processes (its Numba cache starts cold: its first process compiles). Each
process loads the graph, runs the measured call once to warm up, then `--repeats` times, and
reports the median CPU time of those runs; a round runs old and new once each, alternating which
goes first. `--what`: `flagship` (`regal.optimize`, `--budget` evaluations, one Numba thread,
seed 0), `greedy` (`heuristics.greedy_schedule`, the greedy's kernel), `lpmf` (Inductor's LPMF
order) or `allocation` (SPEC 3a's buffer assignment of the greedy's schedule); each through the
public API, so any revision runs it. Prints, per measured call and device count, the medians
over rounds and their ratio (after / before) and the median of the rounds' paired ratios.
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
from regal import heuristics
numba.set_num_threads(1)
g = regal.load(sys.argv[1])
what, d, budget, repeats = sys.argv[5], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if what == "allocation":
    from regal.allocation import allocation
    placement, order = heuristics.greedy_schedule(g, d)
calls = {"flagship": lambda: regal.optimize(g, devices=d, budget=budget, seed=0),
         "greedy": lambda: heuristics.greedy_schedule(g, d),
         "lpmf": lambda: heuristics.lpmf_order(g),
         "allocation": lambda: allocation(g, placement, order, d)}
call = calls[what]
call()
times = []
for _ in range(repeats):
    t = time.process_time()
    call()
    times.append(time.process_time() - t)
print(statistics.median(times))
"""

WHAT = ("flagship", "greedy", "lpmf", "allocation")


def _run(tree: str, what: str, d: int, budget: int, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.join(tree, GRAPH), str(d), str(budget), str(repeats),
                          what], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _unpack(repo: str, rev: str, into: str) -> None:
    archive = subprocess.run(["git", "-C", repo, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_refactor", description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="git revision before the refactor")
    p.add_argument("--new", default=None, help="git revision after it (default: this working tree)")
    p.add_argument("--what", nargs="+", choices=WHAT, default=["flagship"], help="what to time")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=int, default=5000)
    args = p.parse_args(argv)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as old, tempfile.TemporaryDirectory() as other:
        _unpack(repo, args.old, old)
        new = repo
        if args.new:
            _unpack(repo, args.new, other)
            new = other
        print(f"old {args.old}, new {args.new or repo}; {', '.join(args.what)} (flagship: {args.budget:,} "
              f"evaluations), one thread; {args.rounds} rounds of a median of {args.repeats}; load "
              f"{os.getloadavg()[0]:.1f}")
        print("| what | d | before (s) | after (s) | after / before (medians) | paired (median of rounds) |")
        print("|---|---:|---:|---:|---:|---:|")
        for what in args.what:
            for d in args.devices:
                before, after = [], []
                for r in range(args.rounds):
                    pair = [(old, before), (new, after)]
                    for tree, got in (pair if r % 2 == 0 else pair[::-1]):
                        got.append(_run(tree, what, d, args.budget, args.repeats))
                b, a = statistics.median(before), statistics.median(after)
                paired = statistics.median(x / y for x, y in zip(after, before))
                print(f"| {what} | {d} | {b:.4f} | {a:.4f} | {a / b:.3f} | {paired:.3f} |", flush=True)
        print(f"load at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
