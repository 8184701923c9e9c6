"""Local search: iterated hill climbing over device moves and order moves, BRKGA's budget.

REGAL's "local search" baseline (Paliwal et al., ICLR 2020, Table 1): `regal.local_search.solve`,
whose module docstring describes the method (heuristic starts, focused device and order moves,
lexicographic score, plateau walks, kicks). 5,000 evaluations by default, as BRKGA 5K.
"""

from __future__ import annotations

from regal import local_search
from regal.graph import Graph
from regal.local_search import SHIFT, START_NAMES  # noqa: F401 (re-exported)
from regal.solution import Solution

__all__ = ["solve", "SHIFT", "START_NAMES"]


def solve(graph: Graph, devices: int, *, time_limit_s: float | None = None, seed: int = 0,
          budget: int = 5000, start: str = "best", **settings) -> Solution:
    """Hill climbing from a heuristic start; see `regal.local_search.solve` for the settings."""
    return local_search.solve(graph, devices, seed=seed, budget=budget, time_limit_s=time_limit_s,
                              start=start, **settings)
