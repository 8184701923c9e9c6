"""List schedulers for the runtime objective, scored by the timed model (SPEC.md section 4).

- `heft_schedule`: HEFT (Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity
  task scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002). Nodes by decreasing
  upward rank (mean run time over the devices plus the longest path below, a cross-device data
  edge costing `latency + bytes / bandwidth`); each goes to the device where it finishes
  earliest, into the earliest idle gap that fits it (the insertion policy). HEFT's own model
  has no link contention; its placement, with the nodes prioritised by HEFT's start times, is
  then run through the timed model, which has.
- `heft_mem_schedule`: memory-aware HEFT. HEFT's processor selection passes over a device
  whose memory booking (in HEFT's order: resident nodes for good, outputs and copies of remote
  inputs until their last consumer is placed) would exceed a cap; the cap runs down a ladder of
  fractions of the limit (`HEFT_MEM_CAPS`), each result is run through the timed model, and the
  best by the runtime objective is kept. HEFT itself ignores memory, and under a limit that
  binds it is rarely feasible, so this is the list-scheduling baseline a limit needs.
- `critical_path_schedule`: a critical-path list scheduler on the METIS placement
  (`regal.structure.metis_placement`, as gp-dfs places): every device runs its ready node with
  the longest path to the end (bottom level, with this placement's transfers), and every link
  sends first the tensor whose most critical consumer there has the longest path.
- `one_device_schedule`: every node on the fastest device (the sequential sum of the costs),
  in the lowest-peak order of the cheap heuristics (`regal.heuristics`), so it fits a memory
  limit when any of them does.

Only `heft_mem_schedule` looks at memory; the timed model reports every one's peaks, and the
runtime objective (`regal.runtime`) ranks them against a limit. Each returns (placement, TimedSimulation); the
`solve_*` functions are the registry's methods ("heft", "heft-mem", "critical-path", "one-device").
"""

from __future__ import annotations

import time

import numpy as np

from regal.kernels import heft as _heft
from regal.graph import Graph, check_devices
from regal.solution import Solution, timed_solution
from regal.simulate import kernel_graph
from regal.timed import (DeviceModel, TimedSimulation, check_device_model, kernel_devices, memory_limits, run_timed,
                         simulate_timed)

__all__ = ["upward_ranks", "heft_schedule", "heft_mem_schedule", "HEFT_MEM_CAPS", "critical_path_schedule",
           "one_device_schedule", "timed_starts", "TIMED_START_NAMES", "solve_heft", "solve_heft_mem",
           "solve_critical_path", "solve_one_device"]

#: The timed heuristics, in the order the runtime flagship evaluates them as seeds.
TIMED_START_NAMES = ("heft", "heft-mem", "critical-path", "one-device")


def _topological(graph: Graph) -> np.ndarray:
    return graph.cached("topological_int32", lambda: graph.topological_order().astype(np.int32))


def _comm(graph: Graph, model: DeviceModel) -> np.ndarray:
    """float64[n]: seconds to send each node's output over one link."""
    return model.latency_s + graph.bytes.astype(np.float64) / model.bandwidth_bytes_per_s


def _levels(graph: Graph, work: np.ndarray, comm: np.ndarray, placement: np.ndarray) -> np.ndarray:
    level = np.zeros(graph.num_nodes, dtype=np.float64)
    _heft.bottom_levels(_topological(graph), kernel_graph(graph), np.ascontiguousarray(work, dtype=np.float64),
                        np.ascontiguousarray(comm, dtype=np.float64), np.ascontiguousarray(placement, dtype=np.int32),
                        level)
    return level


def upward_ranks(graph: Graph, devices: int, model: DeviceModel) -> np.ndarray:
    """float64[n]: HEFT's upward rank, mean run time over devices plus the longest path below,
    a data edge costing one transfer (none with one device); resident nodes run no time."""
    speed = model.speeds(devices)
    work = np.where(graph.resident, 0.0, graph.cost * np.mean(1.0 / speed))
    comm = _comm(graph, model) if devices > 1 else np.zeros(graph.num_nodes)
    return _levels(graph, work, comm, np.full(graph.num_nodes, -1, dtype=np.int32))


def heft_schedule(graph: Graph, devices: int, device_model=None, cap=None) -> tuple[np.ndarray, TimedSimulation]:
    """HEFT's placement, nodes prioritised by HEFT's start times, run through the timed model.

    `cap` (bytes, one for every device or one per device; None: none) passes over, for each
    node, the devices whose memory booking in HEFT's order would exceed it (`regal.kernels.heft.heft_schedule`).
    """
    model = check_device_model(device_model, devices)
    caps = np.full(devices, np.int64(1) << 62) if cap is None else np.broadcast_to(
        np.asarray(cap, dtype=np.int64), (devices,)).copy()
    rank = upward_ranks(graph, devices, model)
    topo_pos = np.empty(graph.num_nodes, dtype=np.int64)
    topo_pos[_topological(graph)] = np.arange(graph.num_nodes)
    compute = np.flatnonzero(~graph.resident)
    # decreasing rank; among equal ranks (zero-cost chains) topological, so predecessors first
    heft_order = compute[np.lexsort((topo_pos[compute], -rank[compute]))].astype(np.int32)
    placement = np.empty(graph.num_nodes, dtype=np.int32)
    ast = np.empty(graph.num_nodes, dtype=np.float64)
    _heft.heft_schedule(heft_order, kernel_graph(graph), kernel_devices(model, devices), graph.kept, caps, placement,
                        ast)
    order = np.lexsort((topo_pos, ast)).astype(np.int32)  # by HEFT's start time, ties topological
    return placement, simulate_timed(graph, placement, order, devices, model)


#: Fractions of the memory limit that memory-aware HEFT tries as its booking cap (1 = the limit).
HEFT_MEM_CAPS = (1.0, 0.85, 0.7, 0.55, 0.4, 0.25)


def heft_mem_schedule(graph: Graph, devices: int, device_model=None, memory_limit_bytes=None
                      ) -> tuple[np.ndarray, TimedSimulation]:
    """Memory-aware HEFT: HEFT, then HEFT with its booking capped at each `HEFT_MEM_CAPS`
    fraction of the limit (booking in HEFT's order only estimates the timed peak, so a lower cap
    can be what fits); the best by the runtime objective (`regal.timed.runtime_fitness`: the
    shortest feasible, else the least over the limit), the earlier on ties. Without a limit it is HEFT."""
    from regal.timed import makespan_bound, simulation_fitness
    model = check_device_model(device_model, devices)
    limits = memory_limits(memory_limit_bytes, devices)
    best = heft_schedule(graph, devices, model)
    if (limits < 0).all():
        return best
    bound = makespan_bound(graph, devices, model)
    best_score = simulation_fitness(best[1], bound, limits)
    cap_base = np.where(limits < 0, np.int64(1) << 61, limits)
    for frac in HEFT_MEM_CAPS:
        cand = heft_schedule(graph, devices, model, cap=(cap_base * frac).astype(np.int64))
        s = simulation_fitness(cand[1], bound, limits)
        if s < best_score:
            best, best_score = cand, s
    return best


def _critical_path_priorities(graph: Graph, placement: np.ndarray, devices: int,
                              model: DeviceModel) -> tuple[np.ndarray, np.ndarray]:
    speed = model.speeds(devices)
    work = np.where(graph.resident, 0.0, graph.cost / speed[placement])
    level = _levels(graph, work, _comm(graph, model), placement)
    # a transfer (u, q) ranks by the longest path from u's most critical consumer on q
    tprio = np.full((graph.num_nodes, devices), -np.inf)
    consumer = graph.out_idx
    producer = np.repeat(np.arange(graph.num_nodes), np.diff(graph.out_ptr))
    np.maximum.at(tprio, (producer, placement[consumer]), level[consumer])
    return level, tprio


def critical_path_schedule(graph: Graph, devices: int, device_model=None, seed: int = 0,
                           placement=None) -> tuple[np.ndarray, TimedSimulation]:
    """Critical-path list scheduling on the METIS placement (or the `placement` given)."""
    model = check_device_model(device_model, devices)
    if placement is None:
        from regal.structure import metis_placement
        placement = metis_placement(graph, devices, seed)
    placement = np.ascontiguousarray(placement, dtype=np.int32)
    prio, tprio = _critical_path_priorities(graph, placement, devices, model)
    return placement, run_timed(graph, placement, prio, tprio, devices, model)


def one_device_schedule(graph: Graph, devices: int, device_model=None, seed: int = 0
                        ) -> tuple[np.ndarray, TimedSimulation]:
    """Every node on the fastest device (the lowest index among equals), in the lowest-peak
    order of `regal.heuristics`' starts (SPEC.md section 3 at d = 1; the first wins ties)."""
    from regal.heuristics import heuristic_solutions
    from regal.simulate import simulate
    model = check_device_model(device_model, devices)
    best = None
    for _, _, order in heuristic_solutions(graph, 1, seed):
        peak = simulate(graph, np.zeros(graph.num_nodes, dtype=np.int32), order, 1).peak_bytes
        if best is None or peak < best[0]:
            best = (peak, order)
    placement = np.full(graph.num_nodes, int(np.argmax(model.speeds(devices))), dtype=np.int32)
    return placement, simulate_timed(graph, placement, best[1], devices, model)


def timed_starts(graph: Graph, devices: int, device_model=None, seed: int = 0, names=TIMED_START_NAMES,
                 memory_limit_bytes=None):
    """(name, placement, TimedSimulation) of each timed heuristic in `names`, lazily, in order;
    "heft-mem" only under a memory limit (without one it is HEFT)."""
    if memory_limit_bytes is None:
        names = [name for name in names if name != "heft-mem"]
    makers = {"heft": lambda: heft_schedule(graph, devices, device_model),
              "heft-mem": lambda: heft_mem_schedule(graph, devices, device_model, memory_limit_bytes),
              "critical-path": lambda: critical_path_schedule(graph, devices, device_model, seed),
              "one-device": lambda: one_device_schedule(graph, devices, device_model, seed)}
    for name in names:
        if name not in makers:
            raise ValueError(f"unknown timed heuristic {name!r}; known: {', '.join(TIMED_START_NAMES)}")
        yield (name, *makers[name]())


# ---------------------------------------------------------------- registry entries (regal.methods)
def _solve(name: str, make, graph: Graph, devices: int, device_model, memory_limit_bytes) -> Solution:
    t0 = time.perf_counter()
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a regal.Graph, got {type(graph).__name__}")
    devices = check_devices(devices)
    model = check_device_model(device_model, devices)
    memory_limits(memory_limit_bytes, devices)  # a bad limit fails before the work
    placement, sim = make(model)
    return timed_solution(graph, placement, sim, devices, model, method=name, memory_limit_bytes=memory_limit_bytes,
                          seconds=time.perf_counter() - t0, info={"objective": "runtime"})


def solve_heft(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
               device_model=None, memory_limit_bytes=None) -> Solution:
    """HEFT (Topcuoglu et al. 2002), scored by the timed model."""
    return _solve("heft", lambda m: heft_schedule(graph, devices, m), graph, devices, device_model,
                  memory_limit_bytes)


def solve_heft_mem(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                   device_model=None, memory_limit_bytes=None) -> Solution:
    """Memory-aware HEFT (HEFT with a memory booking capped under the limit), scored by the timed model."""
    return _solve("heft-mem", lambda m: heft_mem_schedule(graph, devices, m, memory_limit_bytes), graph, devices,
                  device_model, memory_limit_bytes)


def solve_critical_path(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                        device_model=None, memory_limit_bytes=None) -> Solution:
    """Critical-path list scheduling on the METIS placement, scored by the timed model."""
    return _solve("critical-path", lambda m: critical_path_schedule(graph, devices, m, seed), graph, devices,
                  device_model, memory_limit_bytes)


def solve_one_device(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                     device_model=None, memory_limit_bytes=None) -> Solution:
    """Everything on the fastest device, scored by the timed model."""
    return _solve("one-device", lambda m: one_device_schedule(graph, devices, m, seed), graph, devices,
                  device_model, memory_limit_bytes)
