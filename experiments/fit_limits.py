"""`regal fit` at 0.9x, 1.0x and 1.1x the flagship's peak (issue 35): how often each answer
comes, and that every answer carries its evidence.

    python -m experiments.fit_limits [--every 14] [--max-nodes 1500] [--budget 1000] [--devices 1 2]

On the sample of `experiments.packing_excess` (test graphs of every source): the flagship's
peak P (`--budget` evaluations, seed 0), then `regal.fit.fit` at each limit under
`--time-limit`. `fit` searches in rounds (the flagship at `--budget` evaluations, seeds 0, 1,
2, ...; each round packed) until a plan fits, a bound refuses the limit, or the time limit ends:
"undecided" means "not within --time-limit seconds", and costs all of them (issue 48; before it,
one round of `--budget` evaluations decided, in seconds: the results of 2026-11-26 in
experiments/results/packing/ were measured so). A cell thus takes up to 3x the time limit; at
0.9x most limits are undecided (plan the workers' time for them).

Every answer must carry its evidence: a "fits" a plan that passes `check_plan_json` and whose
arenas are within the limit; a "does not fit" a lower bound (SPEC section 7) above the limit;
an "undecided" the whole time limit spent (at least 95 % of it). Each answer's seconds are kept.
Each (graph, d) is one cell on the experiments' back end (Dask, `--workers`), cached as a file
under experiments/cache/fit_limits/ (`experiments.runner.run_files`; the file names say `rounds`,
so a cell cached by the one-round `fit` is not reused).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import numpy as np

import regal
from experiments.runner import ROOT, json_job, run_files
from regal.dataset import split_paths
from regal.fit import fit
from regal.memory_plan import check_plan_json, plan_json

FACTORS = (0.9, 1.0, 1.1)
#: Share of the time limit an "undecided" answer must have searched: `fit` gives up only when
#: its time is over (a round in progress stops at the deadline, so it ends at the limit or just after).
UNDECIDED_SHARE = 0.95


def fit_row(path: str, d: int, budget: int, time_limit_s: float) -> dict:
    """One cell: the flagship's peak of graph `path` on d devices, and `fit`'s answer at each of
    `FACTORS` times it: [answer, whether its evidence holds, seconds]."""
    g = regal.load(path)
    peak = regal.optimize(g, d, budget, 0).peak_bytes
    answers = []
    for f in FACTORS:
        limit = int(peak * f)
        t = time.perf_counter()
        r = fit(g, limit, d, time_limit_s=time_limit_s, budget=budget, seed=0)
        seconds = time.perf_counter() - t
        answer = {True: "fits", False: "does not fit", None: "undecided"}[r.fits]
        if r.fits:
            arenas = check_plan_json(g, r.solution.placement, r.solution.order, d, plan_json(g, r.plan))
            ok = int(arenas.max()) <= limit
        elif r.fits is False:
            ok = r.bound_bytes > limit and g.lower_bound(d) == r.bound_bytes
        else:
            ok = seconds >= UNDECIDED_SHARE * time_limit_s
        answers.append([answer, bool(ok), round(seconds, 3)])
    return {"graph": g.name, "d": d, "peak": int(peak), "bound": int(g.lower_bound(d)), "answers": answers}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=14)
    ap.add_argument("--max-nodes", type=int, default=1500)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: cores)")
    args = ap.parse_args(argv)
    paths = split_paths("test", manifest="data/manifest_corpus.json", max_nodes=args.max_nodes)[::args.every]
    print(f"{len(paths)} test graphs, budget {args.budget} per round, time limit {args.time_limit:g} s\n")
    print("| graph | d | flagship peak | bound | 0.9x | 1.0x | 1.1x |")
    print("|---|---|---|---|---|---|---|")
    cache = os.path.join(ROOT, "experiments", "cache", "fit_limits")
    cells = [(p, d) for p in paths for d in args.devices]
    files = [os.path.join(cache, os.path.basename(p).split(".")[0],
                          f"d{d}_b{args.budget}_t{args.time_limit:g}_rounds.json") for p, d in cells]
    from regal.parallel import dask_client
    # the cell's function by reference (this module's, not __main__'s): a copy by value would
    # carry the `regal` package object, which Dask's cloudpickle cannot pickle
    from experiments.fit_limits import fit_row as row
    with dask_client(workers=args.workers) as client:
        run_files([(f, json_job, (row, f, p, d, args.budget, args.time_limit)) for f, (p, d) in zip(files, cells)],
                  client, progress=False)
    counts = collections.Counter()
    seconds = collections.defaultdict(list)
    bad = 0
    for file in files:
        with open(file) as fh:
            r = json.load(fh)
        for f, (answer, ok, s) in zip(FACTORS, r["answers"]):
            bad += not ok
            counts[(f, answer)] += 1
            seconds[answer].append(s)
        print(f"| {r['graph']} | {r['d']} | {r['peak']:,} | {r['bound']:,} | "
              + " | ".join(a + ("" if ok else " (NO EVIDENCE)") for a, ok, _ in r["answers"]) + " |", flush=True)
    print("\n| limit | fits | does not fit | undecided |")
    print("|---|---|---|---|")
    for f in FACTORS:
        print(f"| {f}x | {counts[(f, 'fits')]} | {counts[(f, 'does not fit')]} | {counts[(f, 'undecided')]} |")
    print("\n| answer | answers | median seconds | most seconds |")
    print("|---|---|---|---|")
    for answer in ("fits", "does not fit", "undecided"):
        if seconds[answer]:
            print(f"| {answer} | {len(seconds[answer])} | {np.median(seconds[answer]):.2f} | {max(seconds[answer]):.2f} |")
    print(f"\nanswers without their evidence: {bad} (an undecided one: under {UNDECIDED_SHARE:.0%} of the time limit)")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"\n{time.perf_counter() - t:.0f} s")
