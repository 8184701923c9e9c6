"""`regal fit` at 0.9x, 1.0x and 1.1x the flagship's peak (issue 35): how often each answer
comes, and that every answer carries its evidence.

    python -m experiments.fit_limits [--every 14] [--max-nodes 1500] [--budget 1000] [--devices 1 2]

On the sample of `experiments.packing_excess` (test graphs of every source): the flagship's
peak P (`--budget` evaluations, seed 0), then `regal.fit.fit` at each limit with the same
budget and seed. A "fits" must come with a plan that passes `check_plan_json` and whose arenas
are within the limit; a "does not fit" with a lower bound (SPEC section 7) above the limit.
Each (graph, d) is one cell on the experiments' back end (Dask, `--workers`), cached as a file
under experiments/cache/fit_limits/ (`experiments.runner.run_files`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import regal
from experiments.runner import ROOT, json_job, run_files
from regal.dataset import split_paths
from regal.fit import fit
from regal.memory_plan import check_plan_json, plan_json

FACTORS = (0.9, 1.0, 1.1)


def fit_row(path: str, d: int, budget: int, time_limit_s: float) -> dict:
    """One cell: the flagship's peak of graph `path` on d devices, and `fit`'s answer at each of
    `FACTORS` times it, each with whether its evidence holds."""
    g = regal.load(path)
    peak = regal.optimize(g, d, budget, 0).peak_bytes
    answers = []
    for f in FACTORS:
        limit = int(peak * f)
        r = fit(g, limit, d, time_limit_s=time_limit_s, budget=budget, seed=0)
        answer = {True: "fits", False: "does not fit", None: "undecided"}[r.fits]
        if r.fits:
            arenas = check_plan_json(g, r.solution.placement, r.solution.order, d, plan_json(g, r.plan))
            ok = int(arenas.max()) <= limit
        elif r.fits is False:
            ok = r.bound_bytes > limit and g.lower_bound(d) == r.bound_bytes
        else:
            ok = True
        answers.append([answer, bool(ok)])
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
    print(f"{len(paths)} test graphs, budget {args.budget}, time limit {args.time_limit:g} s\n")
    print("| graph | d | flagship peak | bound | 0.9x | 1.0x | 1.1x |")
    print("|---|---|---|---|---|---|---|")
    cache = os.path.join(ROOT, "experiments", "cache", "fit_limits")
    cells = [(p, d) for p in paths for d in args.devices]
    files = [os.path.join(cache, os.path.basename(p).split(".")[0], f"d{d}_b{args.budget}_t{args.time_limit:g}.json")
             for p, d in cells]
    from regal.parallel import dask_client
    with dask_client(workers=args.workers) as client:
        run_files([(f, json_job, (fit_row, f, p, d, args.budget, args.time_limit)) for f, (p, d) in zip(files, cells)],
                  client, progress=False)
    counts = collections.Counter()
    bad = 0
    for file in files:
        with open(file) as fh:
            r = json.load(fh)
        for f, (answer, ok) in zip(FACTORS, r["answers"]):
            bad += not ok
            counts[(f, answer)] += 1
        print(f"| {r['graph']} | {r['d']} | {r['peak']:,} | {r['bound']:,} | "
              + " | ".join(a + ("" if ok else " (NO EVIDENCE)") for a, ok in r["answers"]) + " |", flush=True)
    print("\n| limit | fits | does not fit | undecided |")
    print("|---|---|---|---|")
    for f in FACTORS:
        print(f"| {f}x | {counts[(f, 'fits')]} | {counts[(f, 'does not fit')]} | {counts[(f, 'undecided')]} |")
    print(f"\nanswers without their evidence: {bad}")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"\n{time.perf_counter() - t:.0f} s")
