"""Table 3: train one policy per subset of heads (and two more ablations), then compare them.

    python -m experiments.ablation train [--only PS,S] [--workers 2]   # policies -> experiments/policies/
    python -m experiments.run experiments/configs/table3.json          # the table

Every variant is trained with the same short protocol (below), so the rows compare the heads,
not the training budgets; the shipped policy (longer training) appears as its own row.
Variants: REGAL's six subsets of {placement (P), scheduling (S), elite bias (E)}, plus
"PS-scratch" (no imitation warm start: REINFORCE alone, as in REGAL) and "PS-nostruct" (no
DFS-position and METIS-part features). A finished variant is skipped, so the command resumes.
"""

from __future__ import annotations

import argparse
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

POLICY_DIR = os.path.join(ROOT, "experiments", "policies")

PROTOCOL = dict(devices=(1, 2), steps=40, samples=6, budget=5000, learning_rate=1e-4,
                entropy_coef=0.0005, validate_every=20, valid_seeds=1, checkpoint_every=10,
                imitation_steps=300)
MAX_NODES = 2000
MAX_VALID = 8

VARIANTS = {
    "P": dict(heads=("placement",)),
    "S": dict(heads=("scheduling",)),
    "PS": dict(heads=("placement", "scheduling")),
    "PE": dict(heads=("placement", "elite")),
    "SE": dict(heads=("scheduling", "elite")),
    "PSE": dict(heads=("placement", "scheduling", "elite")),
    "PS-scratch": dict(heads=("placement", "scheduling"), imitation_steps=0),
    "PS-nostruct": dict(heads=("placement", "scheduling"), structure_features=False),
}


def train_variants(names, workers=None, scheduler=None):
    from regal.dataset import split_paths, spread
    from regal.parallel import dask_client
    from regal.policy.network import PolicyConfig
    from regal.training.reinforce import TrainConfig, train
    os.makedirs(POLICY_DIR, exist_ok=True)
    train_paths = split_paths("train", max_nodes=MAX_NODES)
    valid_paths = spread(split_paths("valid", max_nodes=MAX_NODES), MAX_VALID)
    with dask_client(scheduler, workers) as client:
        for name in names:
            out = os.path.join(POLICY_DIR, f"{name}.npz")
            if os.path.exists(out):
                print(f"{name}: done ({out})")
                continue
            v = dict(VARIANTS[name])
            heads = v.pop("heads")
            pc = PolicyConfig(placement="placement" in heads, scheduling="scheduling" in heads,
                              elite="elite" in heads, structure_features=v.pop("structure_features", True),
                              features="v1")  # Table 3 was trained on REGAL's original features
            tc = TrainConfig(**{**PROTOCOL, **v})
            print(f"== training {name}: heads {heads}, {tc}")
            pol = train(train_paths, valid_paths, os.path.join(ROOT, "runs", "ablation", name), pc, tc,
                        client=client, resume=True, log=print)
            pol.meta["variant"] = name
            pol.save(out)
            print(f"{name}: best valid {pol.meta.get('valid_improvement_pct')} -> {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["train"])
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--scheduler", default=None)
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(VARIANTS)
    unknown = set(names) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    train_variants(names, args.workers, args.scheduler)


if __name__ == "__main__":
    main()
