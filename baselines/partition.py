"""GP + DFS: METIS graph partitioning for placement, a depth-first order for the schedule.

REGAL's "GP + DFS" baseline (Paliwal et al., ICLR 2020, Table 1): place with a balanced graph
partitioner, schedule with a depth-first topological order. Our configuration:

- Placement: METIS k-way partitioning (Karypis and Kumar, 1998) through pymetis of the
  undirected graph of data edges (control edges move no bytes and are left out). A vertex weighs
  `bytes + temp_bytes` (the memory it brings to its device); an edge u - v weighs `bytes(u)`, the
  bytes a cut would copy. Parallel edges are merged (weights summed), weights are scaled so that
  their totals stay below 2**30 and clamped to at least 1 (METIS needs positive edge weights),
  `nparts = devices`, METIS's default balance tolerance, `seed` passed to METIS. With one device,
  or no more nodes than devices, METIS is not called.
- Order: post-order DFS from the graph outputs over predecessors (`dfs_order`). Each sink (a
  node without data or control successors) is visited in node order; a node is emitted once all
  its predecessors are, which are visited in the order the graph lists them (data inputs, then
  control inputs). This is the classic memory-friendly order (Sethi and Ullman's evaluation
  order for trees; XLA's post-order scheduler): a value is computed right before the consumer
  that needs it, and one operand's whole cone finishes before the next one starts, so at most one
  branch at a time holds partial results. The alternative, reverse post-order of a forward DFS
  from the inputs (`dfs="inputs"`), also finishes one branch before the next, but it runs each
  producer's consumers as soon as it can, which keeps a fan-out's many results alive together.
  On 14 XLA graphs (7 models, before and after optimization; d = 1 and 2) it was never better
  and up to 3x worse (the outputs DFS won 21 of 28 cases, 7 ties).

Cost: building the METIS graph is O(n + e log e) (a sort to merge parallel edges), METIS itself
O(e log d) in practice, the DFS O(n + e), one simulation O(n + e). Seconds at 20K nodes.
"""

from __future__ import annotations

import time

import numba
import numpy as np

from regal.graph import Graph
from regal.simulate import simulate
from regal.solution import Solution, make_solution

__all__ = ["solve", "metis_placement", "dfs_order", "dfs_postorder"]

_JIT = dict(nogil=True, cache=True)
_WEIGHT_TOTAL = 2 ** 30


@numba.njit(**_JIT)
def _dfs_postorder(roots, child_ptr, child_idx, n, order):
    """Recursive-style post-order DFS without recursion.

    roots: int32[*] visited in this order; children of v are child_idx[child_ptr[v]:child_ptr[v+1]],
    visited in that order. Writes the emitted nodes to order: int32[n]; returns how many.
    """
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the stack, 2 emitted
    stack = np.empty(n, dtype=np.int32)
    edge = np.empty(n, dtype=np.int64)
    t = 0
    for r in roots:
        if state[r] != 0:
            continue
        top = 0
        stack[0] = r
        edge[0] = child_ptr[r]
        state[r] = 1
        while top >= 0:
            v = stack[top]
            e = edge[top]
            if e < child_ptr[v + 1]:
                edge[top] = e + 1
                w = child_idx[e]
                if state[w] == 0:
                    state[w] = 1
                    top += 1
                    stack[top] = w
                    edge[top] = child_ptr[w]
            else:
                state[v] = 2
                order[t] = v
                t += 1
                top -= 1
    return t


def dfs_postorder(roots, child_ptr, child_idx, num_nodes: int) -> np.ndarray:
    """int32[<= n]: post-order DFS from `roots` over the CSR `child_ptr/child_idx` (int64/int32)."""
    order = np.empty(num_nodes, dtype=np.int32)
    t = _dfs_postorder(np.ascontiguousarray(roots, dtype=np.int32),
                       np.ascontiguousarray(child_ptr, dtype=np.int64),
                       np.ascontiguousarray(child_idx, dtype=np.int32), num_nodes, order)
    return order[:t]


def _concat_csr(ptr_a, idx_a, ptr_b, idx_b) -> tuple[np.ndarray, np.ndarray]:
    """Row v of the result is row v of a followed by row v of b."""
    n = ptr_a.shape[0] - 1
    cnt_a, cnt_b = np.diff(ptr_a), np.diff(ptr_b)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cnt_a + cnt_b, out=ptr[1:])
    row = np.repeat(np.arange(n), cnt_a + cnt_b)
    rank = np.arange(row.shape[0]) - ptr[row]  # position inside the merged row
    src = np.empty(row.shape[0], dtype=np.int32)
    from_a = rank < cnt_a[row]
    src[from_a] = idx_a
    src[~from_a] = idx_b
    return ptr, src


def dfs_order(graph: Graph, dfs: str = "outputs") -> np.ndarray:
    """A depth-first topological order, int32[n] (module docstring).

    dfs="outputs": post-order DFS from the sinks (no data or control successors) over
    predecessors, data inputs in listed order, then control inputs.
    dfs="inputs": reverse post-order of a DFS from the sources over successors (both kinds).
    """
    n = graph.num_nodes
    if dfs == "outputs":
        ptr, idx = _concat_csr(graph.in_ptr, graph.in_idx, graph.ctrl_in_ptr, graph.ctrl_in_idx)
        roots = np.flatnonzero(np.diff(graph.succ_ptr) == 0)
        order = dfs_postorder(roots, ptr, idx, n)
    elif dfs == "inputs":
        roots = np.flatnonzero(np.diff(graph.pred_ptr) == 0)
        order = dfs_postorder(roots, graph.succ_ptr, graph.succ_idx, n)[::-1]
    else:
        raise ValueError(f"dfs must be 'outputs' or 'inputs', got {dfs!r}")
    assert order.shape[0] == n, "every node reaches a sink and is reached from a source in a DAG"
    return np.ascontiguousarray(order, dtype=np.int32)


def _scaled(w: np.ndarray) -> np.ndarray:
    """Positive integer weights proportional to w (int64), their sum kept below 2**30."""
    total = float(w.sum())
    scale = min(1.0, _WEIGHT_TOTAL / total) if total > 0 else 1.0
    return np.maximum(1, np.rint(w * scale)).astype(np.int64)


def metis_adjacency(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xadj int64[n+1], adjncy int64[2m], eweights int64[2m]) of the undirected data-edge graph.

    Edge u - v weighs the sum of bytes(producer) over the data edges between u and v.
    """
    n = graph.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.in_ptr))
    src = graph.in_idx.astype(np.int64)
    w = graph.bytes[src].astype(np.int64)
    a = np.concatenate([src, dst])
    b = np.concatenate([dst, src])
    ww = np.concatenate([w, w])
    keep = a != b
    a, b, ww = a[keep], b[keep], ww[keep]
    if a.size:
        key = a * n + b
        perm = np.argsort(key, kind="stable")
        key, ww = key[perm], ww[perm]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        ww = np.add.reduceat(ww, first)
        key = key[first]
        a, b = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=xadj[1:])
    return xadj, b.astype(np.int64), _scaled(ww)


def metis_placement(graph: Graph, devices: int, seed: int = 0) -> np.ndarray:
    """int32[n]: METIS's partition into `devices` parts (module docstring); zeros for d = 1."""
    n = graph.num_nodes
    if devices == 1:
        return np.zeros(n, dtype=np.int32)
    if n <= devices:
        return np.arange(n, dtype=np.int32)
    import pymetis
    xadj, adjncy, eweights = metis_adjacency(graph)
    vweights = _scaled(graph.bytes + graph.temp_bytes)
    options = pymetis.Options(seed=int(seed) % (2 ** 31))
    part = pymetis.part_graph(devices, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                              eweights=eweights if eweights.size else None, options=options)
    return np.asarray(part.vertex_part, dtype=np.int32)


def solve(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, dfs: str = "outputs",
          **options) -> Solution:
    """GP + DFS: METIS placement and a depth-first order (module docstring); one simulation.

    dfs: "outputs" (default, post-order DFS from the outputs), "inputs" (reverse post-order
    from the inputs) or "best" (both, the lower simulated peak; two simulations).
    time_limit_s is accepted for the common signature; the method takes no search time.
    """
    if options:
        raise TypeError(f"gp-dfs: unknown options {sorted(options)}")
    _check_devices(devices)
    t0 = time.perf_counter()
    placement = metis_placement(graph, devices, seed)
    kinds = ("outputs", "inputs") if dfs == "best" else (dfs,)
    orders = {kind: dfs_order(graph, kind) for kind in kinds}
    peaks = {kind: simulate(graph, placement, orders[kind], devices).peak_bytes for kind in kinds}
    kind = min(kinds, key=peaks.__getitem__)
    metis = devices > 1 and graph.num_nodes > devices
    info = {"seed": seed, "dfs": kind, "peaks": peaks, "partitioner": "metis" if metis else "none",
            "device_bytes": np.bincount(placement, weights=graph.bytes, minlength=devices).astype(np.int64)}
    return make_solution(graph, placement, orders[kind], devices, method="gp-dfs",
                         evaluations=len(kinds), seconds=time.perf_counter() - t0, info=info)


def _check_devices(devices) -> None:
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ValueError(f"devices must be a positive integer, got {devices!r}")
