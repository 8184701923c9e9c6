"""The shipped policies per graph source, in REGAL's paper setting (priors in plain BRKGA).

    python -m experiments.policy_sources [--devices 2] [--seeds 0] [--graphs 6]

On each corpus source's test split (--graphs graphs spread over its families, <= 3,000 nodes),
5,000 evaluations: mean % lower peak than plain BRKGA on the same seed of the `default` policy
(policies.md was made with the v1 one, both heads, now experiments/policies/default-v1.npz; since
issue 47 `default` is a v2 scheduling head: experiments/paper_default.py), the `transfer` policy
(v2 features, scheduling head) and the teacher's scheduling half (no network). Runs on Dask (a local cluster of --workers processes), each run
cached as a file under experiments/cache/policy_sources/ (`experiments.transfer.run_many`). Writes
experiments/results/transfer/policies.md.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from experiments.transfer import RESULTS, ROOT, corpus, run_many, spread

POLICIES = ("default", "transfer", "teacher-schedule")
CAVEAT = ("Not a transfer result: `transfer` was trained on the train splits of all six sources, so "
          "these are held-out families of sources it has seen (the leave-one-source-out numbers are in "
          "README.md here). Its recipe (scheduling head, imitation only) was chosen after reading the "
          "leave-one-source-out test results, so those results overstate it too.")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, nargs="+", default=[2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--graphs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    sources = corpus()
    tests = {s: [g["path"] for g in spread([g for g in gs if g["split"] == "test" and g["nodes"] <= 3000],
                                             args.graphs)] for s, gs in sorted(sources.items())}
    cells = [{"setting": "paper", "policy": pol, "path": p, "devices": d, "seed": seed, "budget": 5000}
             for paths in tests.values() for p in paths for d in args.devices for seed in args.seeds
             for pol in ("none",) + POLICIES]
    from regal.parallel import dask_client
    with dask_client(workers=args.workers) as client:
        runs = run_many(cells, os.path.join(ROOT, "experiments", "cache", "policy_sources"), client)
    peaks = {(r["policy"], r["path"], r["devices"], r["seed"]): r["peak"] for r in runs}
    lines = ["# Shipped policies per graph source, REGAL's paper setting", "",
             f"Command: `{' '.join(['python -m experiments.policy_sources', *(argv if argv is not None else sys.argv[1:])])}`", "",
             "Mean % lower peak than plain BRKGA 5K (same seed), test split of each source, "
             f"d in {args.devices}, seeds {args.seeds}, <= {args.graphs} graphs per source.", "",
             "| source | " + " | ".join(POLICIES) + " |", "|---|" + "---:|" * len(POLICIES)]
    for s, paths in tests.items():
        row = []
        for pol in POLICIES:
            imp = [(peaks[("none", p, d, k)] - peaks[(pol, p, d, k)]) / peaks[("none", p, d, k)] * 100
                   for p in paths for d in args.devices for k in args.seeds]
            row.append(f"{np.mean(imp):+.2f}")
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    lines += ["", CAVEAT]
    text = "\n".join(lines) + "\n"
    from regal._io import atomic_text
    os.makedirs(RESULTS, exist_ok=True)
    with atomic_text(os.path.join(RESULTS, "policies.md")) as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
