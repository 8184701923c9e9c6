"""The method registry: every method, the library's and the plugged-in baselines', through one door."""

import numpy as np
import pytest

import regal.methods
from randgraph import random_dag
from regal.graph import Graph
from regal.simulate import check_any, simulate

# Options that keep every method fast on a small graph; nothing here changes what a method is.
FAST = {"cpsat": {"time_limit_s": 2}, "exact": {"time_limit_s": 2}, "moccasin": {"time_limit_s": 2}}
# One-device methods (the exact DP; the recomputation baselines, which run the traced order)
ONE_DEVICE = {"exact", "moccasin", "checkpoint-sqrt", "recompute-pointwise", "traced-order"}
BUDGET = 300


def _graph(seed: int) -> Graph:
    """A random DAG that also carries a topological order as meta['xla_order'] (for `xla`)."""
    g = random_dag(seed, num_nodes=12 + seed, resident_fraction=0.2, control_fraction=0.3)
    meta = dict(g.meta, xla_order=[g.ids[v] for v in g.topological_order()])
    return Graph.from_records(g.to_records(), name=g.name, meta=meta)


def test_registry_names_the_library_methods_and_the_baselines():
    """The flagship, plain BRKGA and REGAL's paper setting come from the library; the baselines
    plug in through the entry point, and every name is unique."""
    names = regal.methods.names()
    assert len(names) == len(set(names))
    for name in ("regal", "regal-paper", "brkga", "teacher"):
        assert regal.methods.get(name).origin == "regal"
    for name in ("cpsat", "exact", "gp-dfs", "local-search", "tuned-brkga", "xla", "xla-heuristics",
                 "inductor-heuristics", "greedy", "random", "gas"):
        assert regal.methods.get(name).origin == "baselines"


def test_unknown_method_and_misplaced_budget_are_value_errors():
    """An unknown name, or a budget for a method that takes none, fails with a clear ValueError."""
    g = _graph(0)
    with pytest.raises(ValueError, match="unknown method"):
        regal.methods.solve("nope", g, 1)
    with pytest.raises(ValueError, match="takes no evaluation budget"):
        regal.methods.solve("gp-dfs", g, 1, budget=10)


@pytest.mark.parametrize("name", regal.methods.names())
@pytest.mark.parametrize("devices", [1, 2])
def test_every_method_returns_a_valid_resimulated_solution_named_after_itself(name, devices):
    """Order topological, every node placed on a device in range, reported peak equal to a fresh
    SPEC section 3 simulation, and the Solution carries the registry's name for the method."""
    spec = regal.methods.get(name)
    if name in ONE_DEVICE and devices > 1:
        pytest.skip(f"{name} is one-device only")
    g = _graph(devices)
    opts = dict(FAST.get(name, {}))
    if name == "moccasin":  # it needs a memory limit: the lower bound's, where it may well be infeasible
        opts["memory_limit_bytes"] = int(g.lower_bound(1)) + 1
    if spec.takes_budget:
        opts["budget"] = BUDGET
    if spec.takes_threads:
        opts["num_threads"] = 1
    sol = regal.methods.solve(name, g, devices, seed=0, **opts)
    check_any(g, sol.placement, sol.order, devices)  # an order may run nodes again (SPEC.md 3b)
    assert sol.placement.shape == (g.num_nodes,) and 0 <= sol.placement.min() and sol.placement.max() < devices
    fresh = simulate(g, sol.placement, sol.order, devices)
    assert sol.peak_bytes == fresh.peak_bytes
    np.testing.assert_array_equal(sol.device_peak_bytes, fresh.device_peak_bytes)
    assert sol.method == name
    if spec.takes_budget:
        assert sol.evaluations <= BUDGET
