"""Every method REGAL is compared with, behind one signature, scored by one simulator.

    solve(graph, devices, *, time_limit_s=None, seed=0, **options) -> regal.Solution

`SOLVERS` maps a method name to its solve function. Modules are imported on first use, so
`import baselines` stays cheap (OR-Tools, pymetis and JAX load only for the methods that need
them). Every solver builds its Solution with `regal.solution.make_solution`, so the reported
peak is a fresh SPEC.md section 3 simulation of the returned placement and order.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

__all__ = ["SOLVERS", "solve", "describe"]

# name -> (module, function, one-line description)
_REGISTRY = {
    "cpsat": ("baselines.cpsat", "solve", "OR-Tools CP-SAT model of SPEC section 3 (placement and order), hinted"),
    "exact": ("baselines.exact", "solve", "exact minimum-peak order on one device, DP over executed sets (Serenity)"),
    "gp-dfs": ("baselines.partition", "solve", "METIS partition (pymetis) for placement + depth-first order"),
    "local-search": ("baselines.local_search", "solve", "hill climbing over device and order moves, same budget"),
    "brkga": ("baselines.brkga", "solve", "plain BRKGA (uniform priors), 5,000 evaluations"),
    "tuned-brkga": ("baselines.brkga", "solve_tuned", "BRKGA with hyper-parameters grid-searched on the train split"),
    "xla": ("baselines.heuristics", "solve_xla", "XLA's own schedule from a scheduled HLO module"),
    "xla-heuristics": ("baselines.heuristics", "solve_xla_heuristics", "best of XLA's list, DFS and post-order schedulers"),
    "inductor-heuristics": ("baselines.heuristics", "solve_inductor_heuristics", "best of Inductor's LPMF, BFS and DFS orders"),
    "greedy": ("baselines.greedy", "solve_greedy", "greedy list scheduling by memory delta"),
    "random": ("baselines.greedy", "solve_random", "random placement and random topological order"),
    "gas": ("baselines.gas", "solve", "graph-as-sequence policy priors for BRKGA"),
}


class _Solvers(Mapping):
    """A read-only mapping name -> solve function that imports each module on first use."""

    def __getitem__(self, name):
        if name not in _REGISTRY:
            raise KeyError(f"unknown method {name!r}; known: {', '.join(_REGISTRY)}")
        module, fn, _ = _REGISTRY[name]
        return getattr(importlib.import_module(module), fn)

    def __iter__(self):
        return iter(_REGISTRY)

    def __len__(self):
        return len(_REGISTRY)


SOLVERS = _Solvers()


def describe(name: str) -> str:
    return _REGISTRY[name][2]


def solve(name: str, graph, devices: int, **kwargs):
    """Run the method `name` (a key of SOLVERS)."""
    return SOLVERS[name](graph, devices, **kwargs)
