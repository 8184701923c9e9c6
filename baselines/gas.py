"""GAS, REGAL's graph-as-sequence baseline: a sequence model's priors for BRKGA.

The policy (`regal/policy/gas.npz`, kind "gas": a bidirectional GRU over the nodes in a
topological order, `regal.policy.network`) is trained exactly like REGAL's GNN (`regal train
--kind gas`) and produces the same per-node priors; only the way it reads the graph differs.
"""

from __future__ import annotations

import time

from regal.graph import check_devices
from regal.search import brkga_search


def solve(graph, devices, *, time_limit_s=None, seed=0, budget=5000, policy="gas", **options):
    """BRKGA with the GAS policy's priors (`policy`: "gas", a path or a Policy)."""
    t0 = time.perf_counter()
    from regal.policy import load_policy
    pol = load_policy(policy) if isinstance(policy, str) else policy
    priors = pol.priors(graph, check_devices(devices))
    return brkga_search(graph, devices, budget=budget, seed=seed, priors=priors, time_limit_s=time_limit_s,
                        method="gas", t0=t0, **options)
