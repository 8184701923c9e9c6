"""The one objective: peak memory of a placement and a global order (SPEC.md section 3).

Every solver in regal is scored by `simulate`. It validates its input (a permutation, a
topological order, devices in range) and then runs the Numba kernel in `regal.kernels.peak_memory`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.kernels import decode as _kernels
from regal.kernels.structs import KernelGraph
from regal.graph import Graph

__all__ = ["ScheduleError", "Simulation", "KernelGraph", "kernel_graph", "check_schedule",
           "simulate", "memory_trace", "peak_of", "is_sequence", "check_any"]


class ScheduleError(ValueError):
    """A placement or order that is not a valid schedule of the graph; the message says why."""


class Simulation(NamedTuple):
    peak_bytes: int                 # max over devices
    device_peak_bytes: np.ndarray   # int64[devices]


def kernel_graph(graph: Graph) -> KernelGraph:
    """The kernel view of `graph` (`regal.kernels.structs.KernelGraph`), built once and cached on it."""
    def make():
        c = np.ascontiguousarray
        return KernelGraph(
            num_nodes=graph.num_nodes,
            pred_cnt=c(np.diff(graph.pred_ptr).astype(np.int32)),
            pred_ptr=c(graph.pred_ptr, dtype=np.int64), pred_idx=c(graph.pred_idx, dtype=np.int32),
            succ_ptr=c(graph.succ_ptr, dtype=np.int64), succ_idx=c(graph.succ_idx, dtype=np.int32),
            in_ptr=c(graph.in_ptr, dtype=np.int64), in_idx=c(graph.in_idx, dtype=np.int32),
            out_ptr=c(graph.out_ptr, dtype=np.int64), out_idx=c(graph.out_idx, dtype=np.int32),
            nbytes=c(graph.bytes, dtype=np.int64), temp=c(graph.temp_bytes, dtype=np.int64),
            resident=c(graph.resident, dtype=np.bool_), output=c(graph.output, dtype=np.bool_),
            cost=c(graph.cost, dtype=np.float64),
            in_bytes=c(graph.bytes[graph.in_idx], dtype=np.int64),
            in_resident=c((graph.resident | graph.output)[graph.in_idx], dtype=np.bool_),
            **_reuse_arrays(graph))
    return graph.cached("kernel_graph", make)


def _reuse_arrays(graph: Graph) -> dict:
    """reuse_ptr / reuse_idx / reuse_own without the inputs that are graph outputs (`output`):
    their home copy is never freed, so no step takes them over (SPEC.md section 3, step 2)."""
    ptr, idx = graph.reuse_ptr, graph.reuse_idx
    owner = np.repeat(np.arange(graph.num_nodes), np.diff(ptr))
    keep = ~graph.output[idx]
    if not keep.all():
        ptr = np.concatenate([[0], np.cumsum(np.bincount(owner[keep], minlength=graph.num_nodes))])
        idx, owner = idx[keep], owner[keep]
    return {"reuse_ptr": np.ascontiguousarray(ptr, dtype=np.int64),
            "reuse_idx": np.ascontiguousarray(idx, dtype=np.int32),
            "reuse_own": np.ascontiguousarray(owner, dtype=np.int32)}


def check_schedule(graph: Graph, placement, order, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a placement (int[n] of devices) and a global order (int[n] of node indices).

    Returns them as contiguous int32 arrays; raises `ScheduleError` naming the first problem.
    """
    n = graph.num_nodes
    if not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ScheduleError(f"devices must be a positive integer, got {devices!r}")
    placement = np.asarray(placement)
    order = np.asarray(order)
    if placement.shape != (n,) or order.shape != (n,):
        raise ScheduleError(f"placement and order must each have {n} entries, got "
                            f"{placement.shape[0] if placement.ndim else 0} and {order.shape[0] if order.ndim else 0}")
    if not (np.issubdtype(placement.dtype, np.integer) and np.issubdtype(order.dtype, np.integer)):
        raise ScheduleError("placement and order must be integer arrays")
    bad = np.flatnonzero((placement < 0) | (placement >= devices))
    if bad.size:
        v = int(bad[0])
        raise ScheduleError(f"node '{graph.ids[v]}' is placed on device {int(placement[v])}, "
                            f"outside 0..{devices - 1}")
    if ((order < 0) | (order >= n)).any():
        raise ScheduleError(f"order holds an index outside 0..{n - 1}")
    pos = np.full(n, -1, dtype=np.int64)
    pos[order] = np.arange(n)
    if (pos < 0).any():
        counts = np.bincount(order, minlength=n)
        dup = int(np.flatnonzero(counts > 1)[0])
        miss = int(np.flatnonzero(counts == 0)[0])
        raise ScheduleError(f"order lists node '{graph.ids[dup]}' twice and misses node '{graph.ids[miss]}'")
    src = graph.pred_idx
    dst = np.repeat(np.arange(n), np.diff(graph.pred_ptr))
    late = np.flatnonzero(pos[src] > pos[dst])
    if late.size:
        e = int(late[0])
        raise ScheduleError(f"order is not topological: node '{graph.ids[dst[e]]}' comes before "
                            f"its input '{graph.ids[src[e]]}'")
    return (np.ascontiguousarray(placement, dtype=np.int32), np.ascontiguousarray(order, dtype=np.int32))


def peak_of(kg: KernelGraph, placement: np.ndarray, order: np.ndarray, devices: int,
            device_peak: np.ndarray, trace: np.ndarray | None = None) -> int:
    """The kernel, unchecked: for callers that evaluate many schedules they built themselves.

    placement, order: int32[n], already valid; device_peak: int64[devices] is written.
    """
    if trace is None:
        trace = np.empty((0, devices), dtype=np.int64)
    return int(_kernels.simulate_peak(kg, order, placement, devices, device_peak, trace))


def is_sequence(graph: Graph, order) -> bool:
    """Whether `order` runs some node more than once (SPEC.md section 3b): longer than the graph."""
    return np.ndim(order) == 1 and np.shape(order)[0] > graph.num_nodes


def check_any(graph: Graph, placement, order, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """`check_schedule`, or for an order with recomputations (section 3b) the placement's check and
    `regal.recompute.check_sequence`; ScheduleError names the first problem."""
    if not is_sequence(graph, order):
        return check_schedule(graph, placement, order, devices)
    from regal.recompute import SequenceError, check_sequence
    n = graph.num_nodes
    placement, _ = check_schedule(graph, placement, np.arange(n), devices)
    try:
        return placement, check_sequence(graph, placement, order, devices)
    except SequenceError as e:
        raise ScheduleError(str(e)) from None


def _run(graph: Graph, placement, order, devices: int, trace: np.ndarray) -> Simulation:
    placement, order = check_any(graph, placement, order, devices)
    device_peak = np.zeros(devices, dtype=np.int64)
    if order.shape[0] > graph.num_nodes:
        from regal._remat import instance_peak
        peak = int(instance_peak(kernel_graph(graph), order, placement, devices, device_peak, trace))
    else:
        peak = peak_of(kernel_graph(graph), placement, order, devices, device_peak, trace)
    return Simulation(peak, device_peak)


def simulate(graph: Graph, placement, order, devices: int) -> Simulation:
    """Peak memory (SPEC.md section 3) of running `order` with `placement` on `devices`; an order
    that runs some node more than once is scored on its instance graph (section 3b)."""
    return _run(graph, placement, order, devices, np.empty((0, devices), dtype=np.int64))


def memory_trace(graph: Graph, placement, order, devices: int) -> tuple[Simulation, np.ndarray]:
    """The simulation and trace: int64[len(order), devices], every device's bytes while step t runs."""
    trace = np.zeros((np.shape(order)[0], devices), dtype=np.int64)
    return _run(graph, placement, order, devices, trace), trace
