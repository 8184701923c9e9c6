"""The flagship as it is now on the graphs of a finished table that have more nodes than the
budget has evaluations (the only ones `regal.FlagshipConfig.climb.anneal_scale_power` changes), against that
table's own cells for the flagship and local search.

    python -m experiments.large_graphs [--results experiments/results/flagship-all] [--min-nodes 5001]

Reruns `regal.optimize` (5,000 evaluations, seeds 0-2, d = 1, 2, 4) on each such graph of the
table's `per_graph.csv` and prints, per graph and d, the mean peak of the table's flagship, the
mean peak now, and local search's mean peak from the table (% lower than local search: positive
is better). The reruns are cells of the experiment runner (Dask, `--workers`; cached under
experiments/cache/large_graphs/, so a rerun at an unchanged commit computes nothing).
"""
import argparse
import csv
import glob
import os

import numpy as np

from experiments.runner import ROOT, Method, cells_for, load_results, run_cells


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join("experiments", "results", "flagship-all"))
    ap.add_argument("--min-nodes", type=int, default=5001)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: cores)")
    a = ap.parse_args(argv)
    rows = list(csv.DictReader(open(os.path.join(a.results, "per_graph.csv"))))
    paths = {os.path.basename(p)[:-len(".json.gz")]: p for p in glob.glob(os.path.join("data", "graphs", "*", "*.json.gz"))}
    cells = {(r["graph"], int(r["devices"]), r["method"]): float(r["mean_peak_bytes"]) for r in rows}
    from regal.parallel import cached_graph, dask_client
    graphs = [(ds, name) for ds, name in sorted({(r["dataset"], r["graph"]) for r in rows})
              if cached_graph(paths[name]).num_nodes >= a.min_nodes]
    runs = cells_for([Method("regal", "regal", {"budget": 5000})], [paths[name] for _, name in graphs], (1, 2, 4),
                     a.seeds)
    cache = os.path.join(ROOT, "experiments", "cache", "large_graphs")
    with dask_client(workers=a.workers) as client:
        run_cells(runs, cache, client=client, progress=False)
    now = {}
    for r in load_results(runs, cache):
        now.setdefault((r["graph"], r["devices"]), []).append(r["peak_bytes"])
    print("| dataset | graph | nodes | d | flagship in the table vs local search % | flagship now vs local search % |")
    print("|---|---|---:|---:|---:|---:|")
    for ds, name in graphs:
        for d in (1, 2, 4):
            ls = cells[(name, d, "local-search")]
            before = cells[(name, d, "regal")]
            mean = float(np.mean(now[(name, d)]))
            print(f"| {ds} | {name} | {cached_graph(paths[name]).num_nodes:,} | {d} | {(ls - before) / ls * 100:+.2f} | "
                  f"{(ls - mean) / ls * 100:+.2f} |", flush=True)


if __name__ == "__main__":
    main()
