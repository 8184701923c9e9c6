"""The packing-aware objective: search for the smallest packed arena instead of the lowest peak.

A schedule's peak (SPEC section 3) is a lower bound on its arena (`regal.memory_plan`); the two
differ when the live buffers cannot be stacked without holes. `optimize_arena` runs the flagship
on the peak with most of the budget (`PEAK_SHARE`), then climbs on the packed arena from its
best schedule: each move takes one node to another step between its inputs and its consumers,
or (d > 1) to another device, and is kept when (the fast heuristic's arena of the fullest device,
the peak) does not get worse. The climb is skipped when the flagship's schedule already packs
at its peak: no schedule the flagship found packs lower. The default objective is untouched:
this is a separate function (`regal.optimize(..., objective="arena")` once the entry point
dispatches to it, `regal optimize --objective arena`).
"""

from __future__ import annotations

import time

import numpy as np

from regal.graph import Graph
from regal.memory_plan import arena_bytes
from regal.simulate import simulate
from regal.solution import Solution, make_solution

__all__ = ["optimize_arena", "PEAK_SHARE"]

#: Share of the budget the flagship spends on the peak before the climb on the arena.
PEAK_SHARE = 0.8


def _score(graph: Graph, placement, order, devices: int) -> tuple[int, int]:
    """(largest quick-heuristic arena over devices, peak)."""
    return arena_bytes(graph, placement, order, devices), int(simulate(graph, placement, order, devices).peak_bytes)


def _move(graph: Graph, placement: np.ndarray, order: np.ndarray, devices: int, rng) -> tuple:
    """A random neighbour: one node to another step within its dependencies, or to another
    device; (placement, order), or None when the drawn node cannot move."""
    n = graph.num_nodes
    v = int(rng.integers(n))
    if devices > 1 and rng.random() < 0.3:
        if graph.resident[v] and rng.random() < 0.5:
            return None
        pl = placement.copy()
        pl[v] = (pl[v] + 1 + rng.integers(devices - 1)) % devices
        return pl, order
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    preds = graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]]
    succs = graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]
    lo = int(pos[preds].max()) + 1 if preds.size else 0
    hi = int(pos[succs].min()) - 1 if succs.size else n - 1
    i = int(pos[v])
    if hi <= lo:
        return None
    j = int(rng.integers(lo, hi + 1))
    if j == i:
        return None
    rest = np.delete(order, i)
    return placement, np.insert(rest, j, v)


def optimize_arena(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *,
                   time_limit_s: float | None = None, start: Solution | None = None, method: str | None = None,
                   **options) -> Solution:
    """Search for the smallest packed arena (module docstring). start: a flagship solution to
    climb from (its budget already spent; then the whole budget goes to the climb); options:
    the flagship's (`regal.optimize`). The Solution's info holds "objective": "arena" and
    "arena_bytes" (the fast heuristic's, largest device) of the returned schedule."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    if start is None:  # regal.optimize(..., objective="arena") runs the flagship first
        raise ValueError("optimize_arena climbs from a start: regal.optimize(graph, ..., objective='arena')")
    climb_budget = budget
    placement = np.asarray(start.placement, dtype=np.int32)
    order = np.asarray(start.order, dtype=np.int32)
    best = _score(graph, placement, order, devices)
    spent = 0
    rng = np.random.default_rng([seed, 0xA7E4A])
    stop = options.get("deadline")
    while (best[0] > best[1] and spent < climb_budget and (deadline is None or time.perf_counter() < deadline)
           and (stop is None or not stop.expired())):
        move = _move(graph, placement, order, devices, rng)
        if move is None:
            continue
        spent += 1
        score = _score(graph, move[0], move[1], devices)
        if score <= best:
            placement, order = np.asarray(move[0], dtype=np.int32), np.asarray(move[1], dtype=np.int32)
            best = score
    info = {**start.info, "objective": "arena", "arena_bytes": best[0], "arena_evaluations": spent}
    return make_solution(graph, placement, order, devices, method=method or start.method,
                         evaluations=start.evaluations + spent, seconds=start.seconds + time.perf_counter() - t0,
                         info=info)
