"""The decoder and simulator of SPEC.md sections 3 and 5 without Numba: the benchmark's references.

`decode_simulate`: what the hot path costs without compilation. It uses NumPy for everything
that vectorizes (placement, consumer counts) and Python for the inherently sequential parts
(Kahn's algorithm with a heap, the memory walk).

`naive_decode_simulate`: the SPEC transcribed literally, with dicts and sets; a copy of the
naive twins `decode` and `simulate` of tests/naive.py (benchmarks do not import the tests), so
the benchmark can say how far the kernels are from the obviously correct version. The
benchmark checks its peaks against the kernels', so a copy that drifted would be caught.
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


def naive_decode_simulate(graph, keys: np.ndarray, d: int) -> int:
    """Peak bytes of the chromosome `keys`, decoded and simulated by the naive twins."""
    placement, order = _naive_decode(graph, keys, d)
    return _naive_simulate(graph, placement, order, d)


def _naive_decode(graph, keys, num_devices):
    """SPEC.md section 5: placement by argmax of affinities (ties low), order by Kahn on priority."""
    n, d = graph.num_nodes, num_devices
    keys = np.asarray(keys, dtype=np.float64).reshape(n, d + 1)
    placement = []
    for v in range(n):
        aff = list(keys[v, :d])
        placement.append(aff.index(max(aff)))  # list.index returns the first (lowest) maximum
    prio = keys[:, d]
    preds = {v: set(graph.inputs(v).tolist()) | set(graph.control_inputs(v).tolist()) for v in range(n)}
    done: set[int] = set()
    order = []
    while len(order) < n:
        ready = [v for v in range(n) if v not in done and preds[v] <= done]
        best = max(ready, key=lambda v: (prio[v], -v))
        order.append(best)
        done.add(best)
    return placement, order


def _naive_simulate(graph, placement, order, num_devices) -> int:
    """SPEC.md section 3, step by step: the peak bytes over every device."""
    n, d = graph.num_nodes, num_devices
    nbytes = [int(b) for b in graph.bytes]
    temp = [int(t) for t in graph.temp_bytes]
    resident_flag = [bool(r) for r in graph.resident]
    consumers = {u: [int(c) for c in graph.consumers(u)] for u in range(n)}
    inputs = {v: [int(u) for u in graph.inputs(v)] for v in range(n)}

    resident = [0] * d
    present = {u: set() for u in range(n)}  # devices holding a copy (home included)
    for u in range(n):
        if resident_flag[u]:
            present[u].add(placement[u])
            resident[placement[u]] += nbytes[u]
    peak = list(resident)
    has_run: set[int] = set()
    home_freed: set[int] = set()

    for v in order:
        if resident_flag[v]:
            continue
        k = placement[v]
        for u in inputs[v]:  # 1. copy in
            if k not in present[u]:
                present[u].add(k)
                resident[k] += nbytes[u]
        resident[k] += nbytes[v] + temp[v]  # 2. run
        peak[k] = max(peak[k], resident[k])
        resident[k] -= temp[v]
        present[v].add(k)
        has_run.add(v)
        for u in inputs[v]:  # 3. free
            home = placement[u]
            on_k = [c for c in consumers[u] if placement[c] == k]
            if k != home and k in present[u] and all(c in has_run for c in on_k):
                present[u].discard(k)
                resident[k] -= nbytes[u]
            if resident_flag[u] or u in home_freed:
                continue
            on_home = [c for c in consumers[u] if placement[c] == home]
            other_devices = {placement[c] for c in consumers[u]} - {home}
            received = all(any(c in has_run for c in consumers[u] if placement[c] == q)
                           for q in other_devices)
            if all(c in has_run for c in on_home) and received:
                home_freed.add(u)
                present[u].discard(home)
                resident[home] -= nbytes[u]
    return max(peak)
