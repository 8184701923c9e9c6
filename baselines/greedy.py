"""Two floors for the comparison: greedy list scheduling, and random placement and order.

- `solve_greedy`: a greedy list scheduler that chooses node and device together on a running
  memory state (what a simple hand-written scheduler would do); `regal.heuristics.greedy_schedule`.
- `solve_random`: uniform placement and a random topological order (one random chromosome);
  `regal.heuristics.random_solution`.
"""

from __future__ import annotations

import time

from regal.graph import Graph, check_devices
from regal.heuristics import greedy_schedule, random_solution
from regal.solution import Solution, make_solution

from .heuristics import _no_options

__all__ = ["solve_greedy", "solve_random", "greedy_schedule"]


def solve_greedy(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """Greedy list scheduling of nodes and devices together (`regal.heuristics.greedy_schedule`).

    One simulation re-scores the schedule exactly. Deterministic (seed unused).
    O(n * ready * d * in-degree).
    """
    _no_options("greedy", options)
    check_devices(devices)
    t0 = time.perf_counter()
    placement, order = greedy_schedule(graph, devices)
    return make_solution(graph, placement, order, devices, method="greedy", evaluations=1,
                         seconds=time.perf_counter() - t0, info={"seed": seed})


def solve_random(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """Uniform random placement and a random topological order (Kahn on uniform priorities).

    The same as decoding one uniform random chromosome (SPEC.md section 5); deterministic per
    seed. O(n log n + e).
    """
    _no_options("random", options)
    check_devices(devices)
    t0 = time.perf_counter()
    placement, order = random_solution(graph, devices, seed)
    return make_solution(graph, placement, order, devices, method="random", evaluations=1,
                         seconds=time.perf_counter() - t0, info={"seed": seed})
