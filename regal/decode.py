"""The chromosome (SPEC.md section 5): random keys -> placement and global order.

Layout, for n nodes and d devices: a float64 vector of n * (d + 1) keys in [0, 1), node-major.
Node v owns keys[v*(d+1) : (v+1)*(d+1)]: its d device affinities, then its scheduling priority.
Viewed as an (n, d+1) matrix, column j < d is the affinity for device j, column d the priority.
"""

from __future__ import annotations

import numpy as np

from regal.kernels import decode as _kernels
from regal._stop import expired
from regal.graph import Graph
from regal.simulate import Simulation, kernel_graph

__all__ = ["chromosome_length", "decode", "decode_evaluate", "encode", "evaluate_population", "evaluated",
           "order_by_priority"]


def chromosome_length(num_nodes: int, devices: int) -> int:
    return num_nodes * (devices + 1)


def _check_keys(graph: Graph, keys, devices: int) -> np.ndarray:
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    want = chromosome_length(graph.num_nodes, devices)
    if keys.shape[-1] != want:
        raise ValueError(f"a chromosome for {graph.num_nodes} nodes and {devices} devices has "
                         f"{want} keys, got {keys.shape[-1]}")
    return keys


def decode_evaluate(graph: Graph, keys, devices: int) -> tuple[np.ndarray, np.ndarray, Simulation]:
    """Decode one chromosome: (placement int32[n], order int32[n], its Simulation)."""
    keys = _check_keys(graph, keys, devices)
    kg = kernel_graph(graph)
    n = kg.num_nodes
    placement = np.empty(n, dtype=np.int32)
    order = np.empty(n, dtype=np.int32)
    device_peak = np.empty(devices, dtype=np.int64)
    peak = _kernels.decode_simulate(kg, keys, devices, placement, order, device_peak,
                                    np.empty((0, devices), dtype=np.int64))
    return placement, order, Simulation(int(peak), device_peak)


def decode(graph: Graph, keys, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Placement int32[n] and global order int32[n] that the chromosome `keys` decodes to."""
    placement, order, _ = decode_evaluate(graph, keys, devices)
    return placement, order


def encode(placement, order, devices: int) -> np.ndarray:
    """A chromosome that decodes to exactly this placement and (topological) order.

    The chosen device gets affinity 0.75 and the others 0.25; priorities fall with position in
    `order`, so Kahn's algorithm always finds the next node of `order` ready and highest.
    """
    placement = np.asarray(placement)
    order = np.asarray(order)
    n = placement.shape[0]
    keys = np.full((n, devices + 1), 0.25)
    keys[np.arange(n), placement] = 0.75
    keys[order, devices] = 1.0 - (np.arange(n) + 1.0) / (n + 1.0)
    return keys.reshape(-1)


#: Node-evaluations (chromosomes x nodes) per kernel call of `evaluate_population` when it polls
#: a deadline: a few tens of milliseconds between two polls.
POLL_NODES = 1_000_000


def evaluate_population(graph: Graph, population, devices: int, deadline=None) -> np.ndarray:
    """float64[m]: peak memory of each chromosome in population float64[m, n*(d+1)].

    Chromosomes are decoded in parallel on Numba's threads (numba.set_num_threads); each one
    independently, so the result does not depend on the thread count. deadline (a
    `regal._stop.Deadline` or an absolute `time.perf_counter()` value): the population is
    decoded in slices of about `POLL_NODES` node-evaluations, and once the deadline has passed
    the chromosomes not yet decoded score +inf (never the best; the first slice is always
    decoded). `evaluated(fitness)` counts the ones that were.
    """
    population = _check_keys(graph, population, devices)
    if population.ndim != 2:
        raise ValueError("population must be a 2-D array (individuals x keys)")
    kg = kernel_graph(graph)
    m = population.shape[0]
    fitness = np.full(m, np.inf, dtype=np.float64)
    step = m if deadline is None else max(1, min(m, POLL_NODES // max(kg.num_nodes, 1)))
    for lo in range(0, m, step):
        if lo > 0 and expired(deadline):
            break
        part = np.empty(min(step, m - lo), dtype=np.float64)
        _kernels.evaluate_population(kg, population[lo:lo + step], devices, part)
        fitness[lo:lo + part.shape[0]] = part
    return fitness


def evaluated(fitness: np.ndarray) -> int:
    """How many chromosomes `evaluate_population` decoded (the rest, cut off by its deadline,
    score +inf; a decoded chromosome's peak is finite)."""
    return int(np.isfinite(fitness).sum())


def order_by_priority(graph: Graph, prio: np.ndarray) -> np.ndarray:
    """int32[n]: Kahn's algorithm taking the ready node of highest `prio` (ties to the lower index)."""
    kg = kernel_graph(graph)
    order = np.empty(kg.num_nodes, dtype=np.int32)
    _kernels.priority_order(np.ascontiguousarray(prio, dtype=np.float64), kg.num_nodes, kg.pred_cnt,
                            kg.succ_ptr, kg.succ_idx, kg.resident, order)
    return order
