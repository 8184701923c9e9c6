"""The decoder and simulator of SPEC.md sections 3 and 5 in plain NumPy + Python (no Numba).

A reference point for the benchmark: what the hot path costs without compilation. It uses
NumPy for everything that vectorizes (placement, consumer counts) and Python for the
inherently sequential parts (Kahn's algorithm with a heap, the memory walk).
"""

from __future__ import annotations

import heapq

import numpy as np


def decode_simulate(graph, keys: np.ndarray, d: int) -> int:
    n = graph.num_nodes
    k2 = keys.reshape(n, d + 1)
    placement = k2[:, :d].argmax(axis=1)  # numpy's argmax takes the first maximum
    prio = k2[:, d]
    # Kahn's algorithm, highest priority first, ties to the lower index
    indeg = np.diff(graph.pred_ptr).tolist()
    succ_ptr, succ_idx = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
    pl = prio.tolist()
    heap = [(-pl[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for w in succ_idx[succ_ptr[v]:succ_ptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (-pl[w], w))
    # memory walk
    nbytes, temp, resident = graph.bytes.tolist(), graph.temp_bytes.tolist(), graph.resident.tolist()
    in_ptr, in_idx = graph.in_ptr.tolist(), graph.in_idx.tolist()
    place = placement.tolist()
    consumer_dev = placement[graph.out_idx]
    remaining = np.zeros((n, d), dtype=np.int64)
    np.add.at(remaining, (np.repeat(np.arange(n), np.diff(graph.out_ptr)), consumer_dev), 1)
    pending = ((remaining > 0).sum(axis=1) - (remaining[np.arange(n), placement] > 0)).tolist()
    remaining = remaining.tolist()
    res = np.bincount(placement[graph.resident], weights=graph.bytes[graph.resident], minlength=d).astype(np.int64).tolist()
    peak = list(res)
    received = set()
    freed = set()
    for v in order:
        if resident[v]:
            continue
        k = place[v]
        ins = in_idx[in_ptr[v]:in_ptr[v + 1]]
        for u in ins:
            if place[u] != k and (u, k) not in received:
                received.add((u, k))
                res[k] += nbytes[u]
                pending[u] -= 1
        res[k] += nbytes[v] + temp[v]
        peak[k] = max(peak[k], res[k])
        res[k] -= temp[v]
        for u in ins:
            h = place[u]
            remaining[u][k] -= 1
            if h != k and remaining[u][k] == 0:
                res[k] -= nbytes[u]
            if not resident[u] and u not in freed and remaining[u][h] == 0 and pending[u] == 0:
                freed.add(u)
                res[h] -= nbytes[u]
    return max(peak)
