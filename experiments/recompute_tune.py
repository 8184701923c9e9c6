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

    python -m experiments.recompute_tune --split tune --devices 1 2 --seeds 0 1 2 --configs "{...}"

runs instead on the recompute benchmark's graphs of that split (data/manifest_recompute.json;
`tune` is its torch-cnn source), seeds as given, against the benchmark's cached flagship cells
(experiments/cache/recompute-engine; run where missing), one Numba thread; a line per run
(JSON) is appended to experiments/results/recompute-tuning/runs.jsonl.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
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
    ap.add_argument("--split", choices=("tune", "held_out"), default=None,
                    help="the recompute benchmark's graphs of this split instead of the corpus's CNNs")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="with --split (default 0 1 2)")
    args = ap.parse_args(argv)
    configs = {k: RecomputeConfig(**v) for k, v in ast.literal_eval(args.configs).items()}
    os.makedirs(OUT, exist_ok=True)
    if args.split:
        return split_runs(args, configs)
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


def split_runs(args, configs) -> None:
    """--split: each config on the benchmark's graphs of the split, seeds as given, d as given."""
    from experiments import recompute_engine as E
    from regal.solution import load_solution
    man = E.load_manifest()
    names = man["splits"][args.split]
    log = open(os.path.join(OUT, "runs.jsonl"), "a", encoding="utf-8")
    for name, cfg in configs.items():
        for d in args.devices:
            per = {}
            for n in names:
                gp = E.graph_path(man, n)
                g = E._graph(gp)
                xs = []
                for s in args.seeds or [0, 1, 2]:
                    cell = E.cell_file(n, "flagship", d, s)
                    if not os.path.exists(cell):
                        E.solve_cell(cell, "regal", gp, d, s, {"budget": args.budget}, {})
                    base = load_solution(cell, g)
                    t = time.perf_counter()
                    sol = optimize_recompute(g, d, args.budget, s, 0.1, recompute_config=cfg, num_threads=1)
                    x = (base.peak_bytes - sol.peak_bytes) / base.peak_bytes * 100
                    xs.append(x)
                    log.write(json.dumps({"config": name, "fields": cfg._asdict(), "graph": n, "d": d, "seed": s,
                                          "flagship": int(base.peak_bytes), "peak": int(sol.peak_bytes), "lower": x,
                                          "extra_fraction": sol.info["recompute"]["extra_fraction"],
                                          "stage1": sol.info["flagship_evaluations"], "code": E.code_state(),
                                          "seconds": time.perf_counter() - t}) + "\n")
                    log.flush()
                per[n] = float(np.mean(xs))
                print(f"{name} d{d} {n} {per[n]:.2f}", flush=True)
            print(f"== {name} d{d} {args.split} mean {np.mean(list(per.values())):.2f} min {min(per.values()):.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
