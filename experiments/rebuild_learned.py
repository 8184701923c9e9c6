"""Issue 57: the learned policy rebuilt by `regal train --head start|moves`, against the shipped one.

    python -m experiments.rebuild_learned OUT/learned.npz [--graphs 2] [--seeds 0 1 2] [--devices 2]

On left-out graphs (the never-trapped test splits of the six sources and the importers,
`experiments.moves._tests`: --graphs per source spread over its list), the flagship at 1,000
evaluations with the rebuilt policy, with the shipped `learned` and without a policy, same
seeds. Prints the table and writes experiments/results/rebuild-learned/README.md (the rebuild's
recipe read from the file's meta) and cells.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "experiments", "results", "rebuild-learned")
BUDGET = 1000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m experiments.rebuild_learned", description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="the rebuilt policy file (OUT/learned.npz of regal train --head moves)")
    ap.add_argument("--graphs", type=int, default=2, help="test graphs per source, spread over its list")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--devices", type=int, nargs="+", default=[2])
    ap.add_argument("--note", default="", help="a line on how the rebuild was made (its size, the load)")
    args = ap.parse_args(argv)
    import regal
    from experiments.moves import _tests
    from experiments.runner import commit, machine
    from regal.policy import load_policy
    rebuilt, shipped = load_policy(args.policy), load_policy("learned")
    rows = []
    t0 = time.time()
    for source, label, path in _tests(args.graphs):
        g = regal.load(path)
        for d in args.devices:
            for seed in args.seeds:
                peaks = {name: regal.optimize(g, d, budget=BUDGET, seed=seed, policy=pol).peak_bytes
                         for name, pol in (("none", "none"), ("shipped", shipped), ("rebuilt", rebuilt))}
                rows.append({"dataset": label, "graph": os.path.basename(path).split(".")[0], "nodes": g.num_nodes,
                             "devices": d, "seed": seed, **peaks})
        print(f"{label} {os.path.basename(path)}: {rows[-1]} ({time.time() - t0:.0f} s)", flush=True)

    def gain(a, b):
        return 100.0 * (a - b) / a
    lines = ["# Issue 57: `learned.npz` rebuilt by `regal train --head start|moves`, against the shipped file", "",
             f"Command: `python -m experiments.rebuild_learned {os.path.relpath(args.policy, ROOT)} --graphs {args.graphs} "
             f"--seeds {' '.join(map(str, args.seeds))} --devices {' '.join(map(str, args.devices))}` at commit {commit()}, "
             f"on {machine()}; load {os.getloadavg()[0]:.1f} at the end.", ""]
    if args.note:
        lines += [args.note, ""]
    lines += ["Left-out graphs: the never-trapped test splits of the six sources and the importers "
              f"({args.graphs} a source, spread over its list), the flagship at 1,000 evaluations, same seed. "
              "*rebuilt vs shipped*: mean % lower peak with the rebuilt policy than with the shipped one "
              "(positive: the rebuilt is better); *vs none*: against the flagship without a policy.", "",
              "| dataset | d | runs | rebuilt vs shipped | shipped vs none | rebuilt vs none | rebuilt better / worse / same |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["devices"]), []).append(r)
        groups.setdefault(("all", r["devices"]), []).append(r)
    for (ds, d), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        vs = [gain(r["shipped"], r["rebuilt"]) for r in rs]
        lines.append(f"| {ds} | {d} | {len(rs)} | {np.mean(vs):+.2f} % | "
                     f"{np.mean([gain(r['none'], r['shipped']) for r in rs]):+.2f} % | "
                     f"{np.mean([gain(r['none'], r['rebuilt']) for r in rs]):+.2f} % | "
                     f"{sum(v > 0 for v in vs)} / {sum(v < 0 for v in vs)} / {sum(v == 0 for v in vs)} |")
    m = rebuilt.meta
    lines += ["", "The rebuild (the file's meta): start head "
              f"{m.get('training_cells')} training cells, {m.get('epochs')} epochs, collect seeds {m.get('collect_seeds')}, "
              f"{m.get('collected_rows')} collected runs, valid cost {m.get('valid_cost', float('nan')):.3f} % above the best "
              f"start (the flagship's own choice {m.get('valid_default_cost', float('nan')):.3f} %); move head "
              f"{(m.get('moves') or {}).get('training_cells')} training cells, "
              f"{(m.get('moves') or {}).get('imitation_steps')} imitation and "
              f"{(m.get('moves') or {}).get('reinforce_steps')} REINFORCE steps, collect seeds "
              f"{(m.get('moves') or {}).get('collect_seeds')}, valid "
              f"{(m.get('moves') or {}).get('valid_vs_none_pct', float('nan')):+.3f} % against no policy."]
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cells.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
