"""Grid search of BRKGA's hyper-parameters on the train split ("Tuned BRKGA" of REGAL's Table 1).

    python -m experiments.tune_brkga [--graphs 24] [--max-nodes 3000] [--workers 2]

Every grid point runs BRKGA with 5,000 evaluations on the same training graphs, device counts
and seeds, through the experiment runner (cached, resumable, on Dask). The point with the best
mean improvement over the default config wins and is written to baselines/tuned_brkga.json with
the whole grid, the command and the commit; `baselines.brkga.solve_tuned` reads it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

from experiments import report
from regal._io import atomic_text
from experiments.run import commit, machine
from experiments.runner import Method, cells_for, load_results, run_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRID = {
    "population_size": (50, 100, 200),
    "elite_fraction": (0.1, 0.2, 0.3),
    "mutant_fraction": (0.05, 0.1, 0.2),
    "elite_inheritance": (0.6, 0.7, 0.8),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=24, help="training graphs used (spread over sizes)")
    ap.add_argument("--max-nodes", type=int, default=3000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "baselines", "tuned_brkga.json"))
    args = ap.parse_args()
    from regal.dataset import split_paths
    from regal.parallel import dask_client
    paths = split_paths("train", max_nodes=args.max_nodes)
    step = max(1, len(paths) // args.graphs)
    paths = paths[::step][:args.graphs]
    methods = []
    for values in itertools.product(*GRID.values()):
        cfg = dict(zip(GRID, values))
        name = "p{population_size}_e{elite_fraction}_m{mutant_fraction}_r{elite_inheritance}".format(**cfg)
        methods.append(Method(name, "brkga", {"config": cfg}))
    default = Method("brkga", "brkga", {})
    cells = cells_for([default] + methods, paths, args.devices, args.seeds)
    cache = os.path.join(ROOT, "experiments", "cache", "tune_brkga")
    t0 = time.time()
    with dask_client(args.scheduler, args.workers) as client:
        run_cells(cells, cache, client=client)
    rows = load_results(cells, cache)
    for r in rows:
        r["dataset"] = "train"
    summary = report.summary_table(report.per_graph(rows, "brkga"), rows, ["brkga"] + [m.name for m in methods])
    summary.sort(key=lambda r: -r["improvement_pct"])
    best = next(r for r in summary if r["method"] != "brkga")
    best_cfg = next(m.options["config"] for m in methods if m.name == best["method"])
    doc = {"config": best_cfg,
           "train_improvement_pct_over_default": round(best["improvement_pct"], 4),
           "command": "python -m experiments.tune_brkga " + " ".join(sys.argv[1:]),
           "commit": commit(), "machine": machine(), "seconds": round(time.time() - t0),
           "graphs": [os.path.basename(p) for p in paths], "devices": args.devices, "seeds": args.seeds,
           "grid": GRID,
           "results": [{"method": r["method"], "improvement_pct": round(r["improvement_pct"], 4),
                        "gap_pct": round(r["gap_pct"], 4)} for r in summary]}
    with atomic_text(args.out) as f:
        json.dump(doc, f, indent=1)
    print(f"best: {best['method']} ({best['improvement_pct']:+.3f}% over the default config on "
          f"{len(paths)} train graphs x devices {args.devices} x seeds {args.seeds}); wrote {args.out}")


if __name__ == "__main__":
    main()
