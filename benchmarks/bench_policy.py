"""Policy cost benchmark (issues 5, 12): feature building + inference against the search it biases.

    python -m benchmarks.bench_policy [--policy default] [--split test] [--repeats 5] [--min-nodes 0]

For every graph of the split: median seconds of `policy.priors(graph, d)` (features + network,
warm: compiled once per bucket beforehand), of one plain BRKGA 5K run (`regal.search.brkga_search`,
all threads) and of one flagship run without priors (`regal.optimize`, 5K), and the policy's
cost as a share of each. Prints a Markdown table and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from benchmarks.bench_engine import median_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="default")
    ap.add_argument("--split", default="test")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--min-nodes", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "policy.md"))
    args = ap.parse_args()
    import regal
    from regal.dataset import split_paths
    from regal.policy import load_policy
    from regal.search import brkga_search
    regal.warmup()
    pol = load_policy(args.policy)
    paths = sorted((p for p in split_paths(args.split) if regal.load(p).num_nodes >= args.min_nodes),
                   key=lambda p: regal.load(p).num_nodes)
    if args.limit:
        paths = paths[::max(1, len(paths) // args.limit)]
    rows = ["| graph | nodes | features (ms) | features + network (ms) | BRKGA 5K (ms) | ratio | "
            "flagship 5K (ms) | ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    ratios, flagship_ratios = [], []
    d = args.devices
    for p in paths:
        g = regal.load(p)
        pol.priors(g, d)  # compile this bucket
        t_feat = median_time(lambda: pol.config.batch(g, d), args.repeats)
        t_pol = median_time(lambda: pol.priors(g, d), args.repeats)
        t_brkga = median_time(lambda: brkga_search(g, d, budget=5000, seed=0), max(3, args.repeats // 2))
        t_flag = median_time(lambda: regal.optimize(g, d, budget=5000, seed=0), max(3, args.repeats // 2))
        ratios.append(t_pol / t_brkga)
        flagship_ratios.append(t_pol / t_flag)
        rows.append(f"| {g.name} | {g.num_nodes:,} | {t_feat * 1e3:.1f} | {t_pol * 1e3:.1f} | "
                    f"{t_brkga * 1e3:.0f} | {100 * t_pol / t_brkga:.1f}% | {t_flag * 1e3:.0f} | "
                    f"{100 * t_pol / t_flag:.1f}% |")
        print(rows[-1], flush=True)
    summary = (f"Median ratio {100 * np.median(ratios):.1f}%, mean {100 * np.mean(ratios):.1f}%, "
               f"max {100 * np.max(ratios):.1f}% of BRKGA 5K; against the flagship 5K: median "
               f"{100 * np.median(flagship_ratios):.1f}%, max {100 * np.max(flagship_ratios):.1f}%; "
               f"over {len(ratios)} graphs (d={d}).")
    print(summary)
    import platform
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"# Policy cost against BRKGA 5K and the flagship 5K\n\nCommand: `python -m benchmarks.bench_policy "
                f"{' '.join(sys.argv[1:])}`  \nCommit: {commit}; {os.cpu_count()} cores, Python "
                f"{platform.python_version()}.\n\n{summary}\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
