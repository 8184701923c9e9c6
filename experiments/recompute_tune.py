"""How the recompute search's settings (`regal.recompute_search.RecomputeConfig`) were chosen.

    python -m experiments.recompute_tune --devices 1 2 --budget 5000 \\
        --configs "{'first 0.4': {'first_share': 0.4}, 'first 0.2': {}, 'first 0.1': {'first_share': 0.1}, \\
                    'pop 20': {'population_size': 20}, 'pop 80': {'population_size': 80}}"

The tuning source is the torch source's CNN training steps of the shipped corpus
(data/graphs/torch/*_train, families resnet, mobilenet, densenet, squeezenet, shufflenet, regnet,
efficientnet, googlenet, mnasnet; small inputs); no other source is read, so every other source
of the recompute benchmark (experiments/recompute_engine.py) is held out. Each cell: % lower peak
than the no-recompute flagship at the same budget and seed, `recompute_budget=0.1`. Prints a
table per device count and the means; writes experiments/results/recompute-tuning/tune-dD.md.
"""

from __future__ import annotations

import argparse
import ast
import glob
import os
import time

import numpy as np

import regal
from regal.recompute_search import RecomputeConfig, optimize_recompute

FAMILIES = ("resnet", "mobilenet", "densenet", "squeezenet", "shufflenet", "regnet", "efficientnet", "googlenet",
            "mnasnet")
OUT = os.path.join(os.path.dirname(__file__), "results", "recompute-tuning")


def tuning_graphs() -> list[str]:
    return [f for f in sorted(glob.glob("data/graphs/torch/*_train.json.gz")) if any(x in f for x in FAMILIES)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, nargs="+", default=[1])
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default="{'default': {}}", help="a Python dict: name -> RecomputeConfig fields")
    args = ap.parse_args(argv)
    configs = {k: RecomputeConfig(**v) for k, v in ast.literal_eval(args.configs).items()}
    os.makedirs(OUT, exist_ok=True)
    for d in args.devices:
        rows, means = [], {k: [] for k in configs}
        for path in tuning_graphs():
            g = regal.load(path)
            base = regal.optimize(g, d, budget=args.budget, seed=args.seed)
            row = [g.name]
            for name, cfg in configs.items():
                t = time.perf_counter()
                sol = optimize_recompute(g, d, args.budget, args.seed, 0.1, recompute_config=cfg)
                gain = (base.peak_bytes - sol.peak_bytes) / base.peak_bytes * 100
                means[name].append(gain)
                row.append(f"{gain:.1f} ({sol.info['recompute']['extra_fraction']:.3f}, {time.perf_counter() - t:.1f} s)")
            rows.append(row)
            print(" | ".join(row), flush=True)
        head = "| graph | " + " | ".join(configs) + " |\n|---|" + "---|" * len(configs) + "\n"
        body = "".join("| " + " | ".join(r) + " |\n" for r in rows)
        mean = "| **mean** | " + " | ".join(f"**{np.mean(v):.2f}**" for v in means.values()) + " |\n"
        text = (f"# Recompute search tuning, d = {d}, {args.budget:,} evaluations, seed {args.seed}\n\n"
                f"% lower peak than the no-recompute flagship (extra_fraction, seconds); `recompute_budget=0.1`.\n\n"
                f"    python -m experiments.recompute_tune --devices {d} --budget {args.budget} "
                f"--configs \"{args.configs}\"\n\n" + head + body + mean)
        with open(os.path.join(OUT, f"tune-d{d}.md"), "w") as f:
            f.write(text)
        print(text)


if __name__ == "__main__":
    main()
