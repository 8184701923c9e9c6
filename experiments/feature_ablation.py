"""What each group of the source-invariant features (v2) is worth on a source the policy never saw.

    python -m experiments.feature_ablation [--held haiku_hlo flax_hlo] [--devices 2] [--seeds 0 1 2]

For each left-out source (the folds of `experiments.transfer`: train on the other sources'
train splits, the torch/layers twins leaving together), one scheduling-head policy per variant
(all of v2; v2 without "sizes", "structure", "graph" or "op", `regal.policy.features.FEATURE_GROUPS`)
imitates the structural teacher for --imitate steps (imitation only: REINFORCE did not improve on
it in `experiments.transfer`), then its priors run in REGAL's paper setting (plain BRKGA, 5,000
evaluations) on the left-out source's test graphs. Reported: mean % lower peak than plain BRKGA
on the same seed. Runs fan out over Dask (a local cluster of --workers processes); policies and
runs (one file each, `experiments.transfer.run_many`) are cached under
experiments/cache/feature_ablation/; results go to experiments/results/transfer/feature_ablation.md.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from experiments.transfer import ROOT, RESULTS, corpus, fold_graphs, run_many

CACHE = os.path.join(ROOT, "experiments", "cache", "feature_ablation")
VARIANTS = {"v2": (), "-sizes": ("sizes",), "-structure": ("structure",), "-graph": ("graph",), "-op": ("op",)}


def policy_file(held: str, name: str, fold: dict, imitate: int) -> str:
    from regal.policy.network import PolicyConfig
    from regal.training.reinforce import TrainConfig, train
    out = os.path.join(CACHE, held, name)
    path = os.path.join(out, "last.npz")
    if not os.path.exists(path):
        cfg = PolicyConfig(features="v2", placement=False, drop_features=VARIANTS[name])
        train([g["path"] for g in fold["train"]], [], out, cfg,
              TrainConfig(steps=0, devices=(1, 2), imitation_steps=imitate, seed=0), log=lambda m: None)
    return path


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--held", nargs="+", default=["haiku_hlo", "flax_hlo"])
    ap.add_argument("--devices", type=int, nargs="+", default=[2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--imitate", type=int, default=300)
    ap.add_argument("--test-graphs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    sources = corpus()
    order = sorted(sources)
    fold_args = argparse.Namespace(train_max_nodes=2000, valid_graphs=6, test_graphs=args.test_graphs,
                                   test_max_nodes=3000)
    cells = []
    for held in args.held:
        fold = fold_graphs(sources, order, held, fold_args)
        policies = {name: policy_file(held, name, fold, args.imitate) for name in VARIANTS}
        for g in fold["test"]:
            for d in args.devices:
                for s in args.seeds:
                    cells.append((held, "plain", "none", g["path"], d, s))
                    cells += [(held, name, p + ":S", g["path"], d, s) for name, p in policies.items()]
    tasks = [{"setting": "paper", "policy": c[2], "path": c[3], "devices": c[4], "seed": c[5], "budget": 5000}
             for c in cells]
    from regal.parallel import dask_client
    with dask_client(workers=args.workers) as client:
        peaks = {c: r["peak"] for c, r in zip(cells, run_many(tasks, os.path.join(CACHE, "runs"), client))}
    ref = {(c[0], c[3], c[4], c[5]): pk for c, pk in peaks.items() if c[1] == "plain"}
    lines = ["# Feature-group ablation of the v2 features on left-out sources", "",
             f"Command: `{' '.join(['python -m experiments.feature_ablation', *(argv if argv is not None else sys.argv[1:])])}`",
             "", f"Scheduling-head policies, {args.imitate} imitation steps on the other sources; REGAL's paper "
             f"setting (priors in plain BRKGA 5K), d in {args.devices}, seeds {args.seeds}, "
             f"{args.test_graphs} test graphs of the left-out source. Mean % lower peak than plain BRKGA.", "",
             "| left-out source | " + " | ".join(VARIANTS) + " |", "|---|" + "---:|" * len(VARIANTS)]
    for held in args.held:
        row = []
        for name in VARIANTS:
            imp = [(ref[(c[0], c[3], c[4], c[5])] - pk) / ref[(c[0], c[3], c[4], c[5])] * 100
                   for c, pk in peaks.items() if c[0] == held and c[1] == name]
            row.append(f"{np.mean(imp):+.2f}")
        lines.append(f"| {held} | " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    from regal._io import atomic_text
    os.makedirs(RESULTS, exist_ok=True)
    with atomic_text(os.path.join(RESULTS, "feature_ablation.md")) as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
