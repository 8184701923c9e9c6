"""The flagship's cost and its reach at scale, against plain BRKGA and the local search.

    python -m benchmarks.bench_flagship --repeats 3            # wall-time table
    python -m benchmarks.bench_flagship --big data/cache/bench_80k.json.gz   # + the 80K-node graph

1. Wall time of `regal.optimize` (the flagship, default settings) against plain BRKGA
   (`regal.search.brkga_search`) at the same budget, in the same process, warm (every kernel
   compiled, each graph run once before timing), median of `--repeats` runs, on 1 and on all
   Numba threads. The flagship's climb is sequential while BRKGA decodes its population on
   every thread, so the ratio is larger on more threads.
2. With `--big`: the 80K-node Transformer training step (`benchmarks.big_graph`), 5,000
   evaluations, d = 2, `--big-seeds` (default 0): median peak of the flagship and the
   local-search baseline over the seeds, and plain BRKGA's on the first.
Writes benchmarks/results/flagship.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

GRAPHS = ("mlp_d16_w256_b32_fwd_pre", "vit_l8_d256_b32_fwd_pre", "vit_l8_d256_b8_train_opt",
          "vit_l12_d384_b32_train_pre")


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def wall_table(repeats: int, budget: int) -> list[str]:
    import numba

    import regal
    from regal.search import brkga_search, numba_threads
    rows = ["| graph | nodes | d | threads | BRKGA s (median) | flagship s (median) | flagship / BRKGA | "
            "BRKGA peak | flagship peak |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    regal.warmup()
    for name in GRAPHS:
        g = regal.load(os.path.join("data", "graphs", "real", f"{name}.json.gz"))
        for d in (1, 2):
            for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
                with numba_threads(threads):
                    regal.optimize(g, d, budget=budget, seed=0)  # warm: per-graph caches
                    tb, b = median_time(lambda: brkga_search(g, d, budget=budget, seed=0), repeats)
                    tf, f = median_time(lambda: regal.optimize(g, d, budget=budget, seed=0), repeats)
                rows.append(f"| {name} | {g.num_nodes:,} | {d} | {threads} | {tb:.3f} | {tf:.3f} | "
                            f"{tf / tb:.2f}x | {b.peak_bytes:,} | {f.peak_bytes:,} |")
                print(rows[-1], flush=True)
    return rows


def big_table(path: str, budget: int, seeds=(0,)) -> list[str]:
    """Flagship and local search on every seed (median reported), plain BRKGA on the first."""
    import regal
    import regal.methods
    g = regal.load(path)
    rows = [f"`{os.path.basename(path)}`: {g.num_nodes:,} nodes, d = 2, {budget:,} evaluations, seeds "
            f"{', '.join(map(str, seeds))} (BRKGA: seed {seeds[0]}); lower bound {g.lower_bound(2):,} B.", "",
            "| method | median peak (MiB) | peaks (B), by seed | median seconds |", "|---|---:|---:|---:|"]
    for method in ("regal", "local-search", "brkga"):
        sols = [regal.methods.solve(method, g, 2, seed=s, budget=budget) for s in (seeds if method != "brkga"
                                                                                    else seeds[:1])]
        peak = float(np.median([s.peak_bytes for s in sols]))
        rows.append(f"| {method} | {peak / 2**20:.2f} | {', '.join(f'{s.peak_bytes:,}' for s in sols)} | "
                    f"{np.median([s.seconds for s in sols]):.1f} |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--big", default=None, help="a large graph file (benchmarks.big_graph) for part 2")
    ap.add_argument("--big-seeds", type=int, nargs="+", default=[0], help="seeds of part 2")
    ap.add_argument("--skip-wall", action="store_true", help="only part 2")
    ap.add_argument("-o", "--out", default=os.path.join("benchmarks", "results", "flagship.md"))
    args = ap.parse_args(argv)
    lines = ["# Flagship benchmark", "", f"Command: `python -m benchmarks.bench_flagship {' '.join(sys.argv[1:] if argv is None else argv)}`".rstrip(), ""]
    if not args.skip_wall:
        lines += ["## Wall time against plain BRKGA at the same budget (same process, warm)", "",
                  *wall_table(args.repeats, args.budget), ""]
    if args.big:
        lines += ["## A large graph", "", *big_table(args.big, args.budget, tuple(args.big_seeds)), ""]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
