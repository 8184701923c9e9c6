"""How far the packed arena is above the peak on the flagship's schedules (issue 35).

    python -m experiments.packing_excess [--every 14] [--max-nodes 1500] [--budget 1000] [--devices 1 2 4]

On a sample of the test graphs of every source (data/manifest_corpus.json, split "test": every
`--every`-th graph of at most `--max-nodes` nodes, in manifest order), per d: the flagship's
schedule (objective "memory", `--budget` evaluations, seed 0) and the packing-aware one
(objective "arena", same budget); for each, the peak (SPEC section 3), the packed arena of its
memory plan (`regal.memory_plan.plan`, 2 s per device; every plan checked) and the XLA-style
allocation (SPEC section 3a) of the flagship's schedule. Excess = (arena - peak) / peak.
Each (graph, d) is one cell on the experiments' back end (Dask, `--workers`), cached as a file
under experiments/cache/packing_excess/ (`experiments.runner.run_files`).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import regal
from experiments.runner import ROOT, json_job, run_files
from regal.allocation import allocation
from regal.dataset import split_paths
from regal.memory_plan import check_plan_json, plan, plan_json


def excess_row(path: str, d: int, budget: int) -> dict | None:
    """One cell: the flagship's and the packing-aware schedule of graph `path` on d devices, their
    peaks and checked arenas, and the XLA-style allocation; None when d exceeds the nodes."""
    g = regal.load(path)
    if d > g.num_nodes:
        return None
    out = []
    for objective in ("memory", "arena"):
        sol = regal.optimize(g, d, budget, 0, objective=objective)
        mp = plan(g, sol.placement, sol.order, d, time_limit_s=2.0)
        check_plan_json(g, sol.placement, sol.order, d, plan_json(g, mp))  # a second, independent check
        out.append((sol, int(mp.arena_bytes.max())))
    (s0, a0), (s1, a1) = out
    xla = allocation(g, s0.placement, s0.order, d).allocation_bytes
    return {"graph": g.name, "nodes": g.num_nodes, "d": d, "peak": int(s0.peak_bytes), "arena": a0,
            "xla": int(xla), "arena_peak": int(s1.peak_bytes), "arena_arena": a1}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=14)
    ap.add_argument("--max-nodes", type=int, default=1500)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: cores)")
    args = ap.parse_args(argv)
    paths = split_paths("test", manifest="data/manifest_corpus.json", max_nodes=args.max_nodes)[::args.every]
    print(f"{len(paths)} test graphs (every {args.every}th of at most {args.max_nodes} nodes), budget {args.budget}\n")
    print("| graph | nodes | d | peak | arena | excess | XLA-style | arena objective: peak | arena | excess |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cache = os.path.join(ROOT, "experiments", "cache", "packing_excess")
    files = [os.path.join(cache, os.path.basename(p).split(".")[0], f"d{d}_b{args.budget}.json")
             for p in paths for d in args.devices]
    jobs = [(f, json_job, (excess_row, f, p, d, args.budget))
            for f, (p, d) in zip(files, ((p, d) for p in paths for d in args.devices))]
    from regal.parallel import dask_client
    with dask_client(workers=args.workers) as client:
        run_files(jobs, client, progress=False)
    rows = {d: [] for d in args.devices}
    for f in files:
        with open(f) as fh:
            r = json.load(fh)
        if r is None:
            continue
        e0 = (r["arena"] - r["peak"]) / r["peak"] * 100
        e1 = (r["arena_arena"] - r["arena_peak"]) / r["arena_peak"] * 100
        rows[r["d"]].append((e0, e1, (r["xla"] - r["peak"]) / r["peak"] * 100,
                             (r["arena_arena"] - r["arena"]) / r["arena"] * 100))
        print(f"| {r['graph']} | {r['nodes']} | {r['d']} | {r['peak']:,} | {r['arena']:,} | {e0:+.2f} % | {r['xla']:,} | "
              f"{r['arena_peak']:,} | {r['arena_arena']:,} | {e1:+.2f} % |", flush=True)
    print("\n| d | graphs | arena over peak (mean) | at the peak | arena objective over its peak (mean) | "
          "arena objective vs memory's arena (mean) | XLA-style over peak (mean) |")
    print("|---|---|---|---|---|---|---|")
    for d, r in rows.items():
        a = np.asarray(r)
        print(f"| {d} | {len(r)} | {a[:, 0].mean():+.3f} % | {int((a[:, 0] == 0).sum())} | {a[:, 1].mean():+.3f} % | "
              f"{a[:, 3].mean():+.3f} % | {a[:, 2].mean():+.2f} % |")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"\n{time.perf_counter() - t:.0f} s")
