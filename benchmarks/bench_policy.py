"""Policy cost benchmark (issue 5): feature building + inference against BRKGA 5K on the same graph.

    python -m benchmarks.bench_policy [--policy default] [--split test] [--repeats 5]

For every graph of the split: median seconds of `policy.priors(graph, d)` (features + network,
warm: compiled once per bucket beforehand) and of one plain BRKGA 5K run
(`regal.search.brkga_search`, all threads), and their ratio. Prints a Markdown table and writes it
to benchmarks/results/policy.md.
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
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "policy.md"))
    args = ap.parse_args()
    import regal
    from regal.dataset import split_paths
    from regal.policy import load_policy
    from regal.search import brkga_search
    regal.warmup()
    pol = load_policy(args.policy)
    paths = sorted(split_paths(args.split), key=lambda p: regal.load(p).num_nodes)
    if args.limit:
        paths = paths[::max(1, len(paths) // args.limit)]
    rows = ["| graph | nodes | features (ms) | features + network (ms) | BRKGA 5K (ms) | ratio |",
            "|---|---:|---:|---:|---:|---:|"]
    ratios = []
    d = args.devices
    for p in paths:
        g = regal.load(p)
        pol.priors(g, d)  # compile this bucket
        t_feat = median_time(lambda: pol.config.batch(g, d), args.repeats)
        t_pol = median_time(lambda: pol.priors(g, d), args.repeats)
        t_brkga = median_time(lambda: brkga_search(g, d, budget=5000, seed=0), max(3, args.repeats // 2))
        ratios.append(t_pol / t_brkga)
        rows.append(f"| {g.name} | {g.num_nodes:,} | {t_feat * 1e3:.1f} | {t_pol * 1e3:.1f} | "
                    f"{t_brkga * 1e3:.0f} | {100 * t_pol / t_brkga:.1f}% |")
        print(rows[-1], flush=True)
    summary = (f"Median ratio {100 * np.median(ratios):.1f}%, mean {100 * np.mean(ratios):.1f}%, "
               f"max {100 * np.max(ratios):.1f}% over {len(ratios)} graphs (d={d}).")
    print(summary)
    import platform
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(f"# Policy cost against BRKGA 5K\n\nCommand: `python -m benchmarks.bench_policy "
                f"{' '.join(sys.argv[1:])}`  \nCommit: {commit}; {os.cpu_count()} cores, Python "
                f"{platform.python_version()}.\n\n{summary}\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
