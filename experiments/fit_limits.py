"""`regal fit` at 0.9x, 1.0x and 1.1x the flagship's peak (issue 35): how often each answer
comes, and that every answer carries its evidence.

    python -m experiments.fit_limits [--every 14] [--max-nodes 1500] [--budget 1000] [--devices 1 2]

On the sample of `experiments.packing_excess` (test graphs of every source): the flagship's
peak P (`--budget` evaluations, seed 0), then `regal.fit.fit` at each limit with the same
budget and seed. A "fits" must come with a plan that passes `check_plan_json` and whose arenas
are within the limit; a "does not fit" with a lower bound (SPEC section 7) above the limit.
"""

from __future__ import annotations

import argparse
import collections
import time

import regal
from regal.dataset import split_paths
from regal.fit import fit
from regal.memory_plan import check_plan_json, plan_json


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=14)
    ap.add_argument("--max-nodes", type=int, default=1500)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args(argv)
    paths = split_paths("test", manifest="data/manifest_corpus.json", max_nodes=args.max_nodes)[::args.every]
    print(f"{len(paths)} test graphs, budget {args.budget}, time limit {args.time_limit:g} s\n")
    print("| graph | d | flagship peak | bound | 0.9x | 1.0x | 1.1x |")
    print("|---|---|---|---|---|---|---|")
    counts = collections.Counter()
    bad = 0
    for p in paths:
        g = regal.load(p)
        for d in args.devices:
            peak = regal.optimize(g, d, args.budget, 0).peak_bytes
            cells = []
            for f in (0.9, 1.0, 1.1):
                limit = int(peak * f)
                r = fit(g, limit, d, time_limit_s=args.time_limit, budget=args.budget, seed=0)
                answer = {True: "fits", False: "does not fit", None: "undecided"}[r.fits]
                if r.fits:
                    arenas = check_plan_json(g, r.solution.placement, r.solution.order, d, plan_json(g, r.plan))
                    ok = int(arenas.max()) <= limit
                elif r.fits is False:
                    ok = r.bound_bytes > limit and g.lower_bound(d) == r.bound_bytes
                else:
                    ok = True
                bad += not ok
                counts[(f, answer)] += 1
                cells.append(answer + ("" if ok else " (NO EVIDENCE)"))
            print(f"| {g.name} | {d} | {peak:,} | {g.lower_bound(d):,} | " + " | ".join(cells) + " |", flush=True)
    print("\n| limit | fits | does not fit | undecided |")
    print("|---|---|---|---|")
    for f in (0.9, 1.0, 1.1):
        print(f"| {f}x | {counts[(f, 'fits')]} | {counts[(f, 'does not fit')]} | {counts[(f, 'undecided')]} |")
    print(f"\nanswers without their evidence: {bad}")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"\n{time.perf_counter() - t:.0f} s")
