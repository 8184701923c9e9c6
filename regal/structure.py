"""Structural helpers shared by the policy's features and the baselines: orders and partitions.

- `dfs_order`: a depth-first topological order (post-order DFS from the outputs: each operand's
  whole cone finishes before the next starts, the classic memory-friendly order).
- `metis_placement`: a balanced k-way METIS partition (pymetis) of the undirected data-edge graph,
  vertex weight = bytes + temp, edge weight = bytes a cut would copy.

The GP + DFS baseline (`baselines.partition`) is these two; the policy reads both as features.
"""

from __future__ import annotations

import numpy as np

from regal.kernels import orders as _orders
from regal._io import stdout_to_stderr
from regal.graph import Graph

__all__ = ["dfs_order", "dfs_postorder", "metis_placement", "metis_adjacency", "concat_csr"]

_WEIGHT_TOTAL = 2 ** 30


def dfs_postorder(roots, child_ptr, child_idx, num_nodes: int) -> np.ndarray:
    """int32[<= n]: post-order DFS from `roots` over the CSR `child_ptr/child_idx` (int64/int32)."""
    order = np.empty(num_nodes, dtype=np.int32)
    t = _orders.dfs_postorder(np.ascontiguousarray(roots, dtype=np.int32),
                               np.ascontiguousarray(child_ptr, dtype=np.int64),
                               np.ascontiguousarray(child_idx, dtype=np.int32), num_nodes, order)
    return order[:t]


def concat_csr(ptr_a, idx_a, ptr_b, idx_b) -> tuple[np.ndarray, np.ndarray]:
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
        ptr, idx = concat_csr(graph.in_ptr, graph.in_idx, graph.ctrl_in_ptr, graph.ctrl_in_idx)
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
    with stdout_to_stderr():  # METIS prints its warnings to the C stdout, a `--json` answer's stream
        part = pymetis.part_graph(devices, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                  eweights=eweights if eweights.size else None, options=options)
    return np.asarray(part.vertex_part, dtype=np.int32)
