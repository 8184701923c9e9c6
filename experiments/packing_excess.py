"""How far the packed arena is above the peak on the flagship's schedules (issue 35).

    python -m experiments.packing_excess [--every 14] [--max-nodes 1500] [--budget 1000] [--devices 1 2 4]

On a sample of the test graphs of every source (data/manifest_corpus.json, split "test": every
`--every`-th graph of at most `--max-nodes` nodes, in manifest order), per d: the flagship's
schedule (objective "memory", `--budget` evaluations, seed 0) and the packing-aware one
(objective "arena", same budget); for each, the peak (SPEC section 3), the packed arena of its
memory plan (`regal.memory_plan.plan`, 2 s per device; every plan checked) and the XLA-style
allocation (SPEC section 3a) of the flagship's schedule. Excess = (arena - peak) / peak.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import regal
from regal.allocation import allocation
from regal.dataset import split_paths
from regal.memory_plan import check_plan_json, plan, plan_json


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=14)
    ap.add_argument("--max-nodes", type=int, default=1500)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args(argv)
    paths = split_paths("test", manifest="data/manifest_corpus.json", max_nodes=args.max_nodes)[::args.every]
    print(f"{len(paths)} test graphs (every {args.every}th of at most {args.max_nodes} nodes), budget {args.budget}\n")
    print("| graph | nodes | d | peak | arena | excess | XLA-style | arena objective: peak | arena | excess |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = {d: [] for d in args.devices}
    for p in paths:
        g = regal.load(p)
        for d in args.devices:
            if d > g.num_nodes:
                continue
            out = []
            for objective in ("memory", "arena"):
                sol = regal.optimize(g, d, args.budget, 0, objective=objective)
                mp = plan(g, sol.placement, sol.order, d, time_limit_s=2.0)
                check_plan_json(g, sol.placement, sol.order, d, plan_json(g, mp))  # a second, independent check
                out.append((sol, int(mp.arena_bytes.max())))
            (s0, a0), (s1, a1) = out
            xla = allocation(g, s0.placement, s0.order, d).allocation_bytes
            e0, e1 = (a0 - s0.peak_bytes) / s0.peak_bytes * 100, (a1 - s1.peak_bytes) / s1.peak_bytes * 100
            rows[d].append((e0, e1, (xla - s0.peak_bytes) / s0.peak_bytes * 100, (a1 - a0) / a0 * 100))
            print(f"| {g.name} | {g.num_nodes} | {d} | {s0.peak_bytes:,} | {a0:,} | {e0:+.2f} % | {xla:,} | "
                  f"{s1.peak_bytes:,} | {a1:,} | {e1:+.2f} % |", flush=True)
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
