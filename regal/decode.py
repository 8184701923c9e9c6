"""The chromosome (SPEC.md section 5): random keys -> placement and global order.

Layout, for n nodes and d devices: a float64 vector of n * (d + 1) keys in [0, 1), node-major.
Node v owns keys[v*(d+1) : (v+1)*(d+1)]: its d device affinities, then its scheduling priority.
Viewed as an (n, d+1) matrix, column j < d is the affinity for device j, column d the priority.
"""

from __future__ import annotations

import numpy as np

from regal import _kernels
from regal.graph import Graph
from regal.simulate import Simulation, kernel_graph

__all__ = ["chromosome_length", "decode", "decode_evaluate", "encode", "evaluate_population",
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
    peak = _kernels.decode_simulate(keys, n, devices, kg.pred_cnt, kg.succ_ptr, kg.succ_idx,
                                    kg.in_ptr, kg.in_idx, kg.in_bytes, kg.in_resident, kg.out_ptr,
                                    kg.out_idx, kg.nbytes, kg.temp, kg.resident, kg.reuse_ptr, kg.reuse_idx,
                                    placement, order, device_peak, np.empty((0, devices), dtype=np.int64))
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


def evaluate_population(graph: Graph, population, devices: int) -> np.ndarray:
    """float64[m]: peak memory of each chromosome in population float64[m, n*(d+1)].

    Chromosomes are decoded in parallel on Numba's threads (numba.set_num_threads); each one
    independently, so the result does not depend on the thread count.
    """
    population = _check_keys(graph, population, devices)
    if population.ndim != 2:
        raise ValueError("population must be a 2-D array (individuals x keys)")
    kg = kernel_graph(graph)
    fitness = np.empty(population.shape[0], dtype=np.float64)
    _kernels.evaluate_population(population, kg.num_nodes, devices, kg.pred_cnt, kg.succ_ptr,
                                 kg.succ_idx, kg.in_ptr, kg.in_idx, kg.in_bytes, kg.in_resident,
                                 kg.out_ptr, kg.out_idx, kg.nbytes, kg.temp, kg.resident, kg.reuse_ptr,
                                 kg.reuse_idx, fitness)
    return fitness


def order_by_priority(graph: Graph, prio: np.ndarray) -> np.ndarray:
    """int32[n]: Kahn's algorithm taking the ready node of highest `prio` (ties to the lower index)."""
    kg = kernel_graph(graph)
    order = np.empty(kg.num_nodes, dtype=np.int32)
    _kernels.priority_order(np.ascontiguousarray(prio, dtype=np.float64), kg.num_nodes, kg.pred_cnt,
                            kg.succ_ptr, kg.succ_idx, kg.resident, order)
    return order
