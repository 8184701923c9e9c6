"""GAS, REGAL's graph-as-sequence baseline: a sequence model's priors for BRKGA.

The policy (`regal/policy/gas.npz`, kind "gas": a bidirectional GRU over the nodes in a
topological order, `regal.policy.network`) is trained exactly like REGAL's GNN (`regal train
--kind gas`) and produces the same per-node priors; only the way it reads the graph differs.
"""

from __future__ import annotations

from dataclasses import replace

from regal.search import optimize


def solve(graph, devices, *, time_limit_s=None, seed=0, budget=5000, policy="gas", **options):
    from regal.policy import load_policy
    pol = load_policy(policy)
    sol = optimize(graph, devices=devices, budget=budget, seed=seed, priors=pol.priors(graph, devices),
                   time_limit_s=time_limit_s, **options)
    return replace(sol, method="gas")
