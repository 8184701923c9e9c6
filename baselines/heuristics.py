"""Compiler schedules, each scored by the SPEC.md section 3 simulator.

- `solve_xla`: the order XLA itself chose (`graph.meta["xla_order"]` of a scheduled HLO module).
- `solve_xla_heuristics`: the best of XLA's three memory schedulers (list, DFS, post-order);
  XLA's `DefaultMemoryScheduler` also keeps the lowest simulated heap of the three.
- `solve_inductor_heuristics`: the best of PyTorch Inductor's peak-memory reorderings
  (the original order, least-peak-memory-first, BFS, DFS).

The orders themselves are `regal.heuristics`' (re-exported here); the greedy list scheduler and
the random floor are in `greedy`. The compilers schedule one device. For d > 1, `solve_xla`
puts every node on device 0 (what a single-device compiler does); the xla- and
inductor-heuristics take gp-dfs's METIS placement (`regal.structure.metis_placement`) and pick
their best order under the d-device simulator.
"""

from __future__ import annotations

import time

import numpy as np

from regal.graph import Graph, check_devices
from regal.heuristics import (SCALAR_BYTES, inductor_bfs_order, inductor_dfs_order,  # noqa: F401
                              lpmf_order, xla_dfs_order, xla_list_order, xla_post_order)  # re-exported
from regal.simulate import simulate
from regal.solution import Solution, make_solution
from regal.structure import metis_placement

__all__ = ["solve_xla", "solve_xla_heuristics", "solve_inductor_heuristics", "xla_list_order",
           "xla_dfs_order", "xla_post_order", "lpmf_order", "inductor_bfs_order", "inductor_dfs_order"]


def _best_order(graph: Graph, devices: int, placement: np.ndarray, orders: dict, method: str,
                t0: float, info: dict) -> Solution:
    """Score every candidate order with the simulator; keep the first lowest (dict order)."""
    peaks = {name: simulate(graph, placement, order, devices).peak_bytes for name, order in orders.items()}
    chosen = min(peaks, key=peaks.__getitem__)
    info = dict(info, chosen=chosen, peaks=peaks)
    return make_solution(graph, placement, orders[chosen], devices, method=method,
                         evaluations=len(orders), seconds=time.perf_counter() - t0, info=info)


def _placement_for(graph: Graph, devices: int, seed: int) -> tuple[np.ndarray, dict]:
    if devices == 1:
        return np.zeros(graph.num_nodes, dtype=np.int32), {}
    return metis_placement(graph, devices, seed), {
        "placement": "gp-dfs METIS placement; the compiler heuristics order one device"}


def solve_xla(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """XLA's own schedule, `graph.meta["xla_order"]` (node ids), on device 0.

    A single-device compiler runs everything on one device, so for d > 1 every node still goes
    to device 0 (info says so). Raises ValueError when the graph carries no usable xla_order.
    """
    _no_options("xla", options)
    check_devices(devices)
    t0 = time.perf_counter()
    ids = graph.meta.get("xla_order")
    if not ids:
        raise ValueError(f"graph '{graph.name}' has no meta['xla_order'] (not from a scheduled HLO module)")
    index = graph.index
    missing = [nid for nid in ids if nid not in index]
    if missing or len(ids) != graph.num_nodes or len(set(ids)) != graph.num_nodes:
        raise ValueError(f"graph '{graph.name}': meta['xla_order'] is not a permutation of its "
                         f"{graph.num_nodes} nodes ({len(ids)} entries, {len(missing)} unknown)")
    order = np.fromiter((index[nid] for nid in ids), dtype=np.int32, count=graph.num_nodes)
    info = {"source": "meta['xla_order']"}
    if devices > 1:
        info["placement"] = f"all nodes on device 0 of {devices}: XLA schedules one device"
    return make_solution(graph, np.zeros(graph.num_nodes, dtype=np.int32), order, devices,
                         method="xla", evaluations=1, seconds=time.perf_counter() - t0, info=info)


def solve_xla_heuristics(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0,
                         **options) -> Solution:
    """The lowest simulated peak of XLA's list, DFS and post-order schedulers.

    As XLA's DefaultMemoryScheduler: ties prefer list, then DFS, then post-order. For d > 1 the
    placement is gp-dfs's METIS partition (`seed` feeds METIS) and the orders are scored on it.
    Three simulations; O(n * ready + e log e).
    """
    _no_options("xla-heuristics", options)
    check_devices(devices)
    t0 = time.perf_counter()
    placement, info = _placement_for(graph, devices, seed)
    post = xla_post_order(graph)
    orders = {"list": xla_list_order(graph), "dfs": xla_dfs_order(graph, post), "post_order": post}
    return _best_order(graph, devices, placement, orders, "xla-heuristics", t0, info)


def solve_inductor_heuristics(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0,
                              **options) -> Solution:
    """The lowest simulated peak of Inductor's `reorder_for_peak_memory` candidates.

    Candidates, in Inductor's order (first wins a tie): the original order (Kahn by node index,
    the file order of a topologically listed graph), least-peak-memory-first, BFS, DFS. For d > 1
    the placement is gp-dfs's METIS partition. Four simulations; O(n * ready + e log e).
    """
    _no_options("inductor-heuristics", options)
    check_devices(devices)
    t0 = time.perf_counter()
    placement, info = _placement_for(graph, devices, seed)
    orders = {"baseline": graph.topological_order().astype(np.int32), "lpmf": lpmf_order(graph),
              "bfs": inductor_bfs_order(graph), "dfs": inductor_dfs_order(graph)}
    return _best_order(graph, devices, placement, orders, "inductor-heuristics", t0, info)


def _no_options(method: str, options: dict) -> None:
    if options:
        raise TypeError(f"{method}: unknown options {sorted(options)}")
