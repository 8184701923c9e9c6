"""Slow, obviously correct reference implementations (the "naive twins" of regal's kernels).

Each function transcribes SPEC.md literally, with dicts and sets and no cleverness, so that the
Numba kernels can be checked against it on many random graphs.
"""

from __future__ import annotations

import itertools

import numpy as np


def decode(graph, keys, num_devices):
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


def simulate(graph, placement, order, num_devices):
    """SPEC.md section 3, step by step. Returns (peak_bytes, device_peak_bytes list)."""
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
    return max(peak), peak


def is_topological(graph, order):
    pos = {v: i for i, v in enumerate(order)}
    if sorted(pos) != list(range(graph.num_nodes)):
        return False
    for v in range(graph.num_nodes):
        for u in itertools.chain(graph.inputs(v), graph.control_inputs(v)):
            if pos[int(u)] > pos[v]:
                return False
    return True


def all_topological_orders(graph):
    """Every topological order (only for tiny graphs)."""
    n = graph.num_nodes
    preds = [set(graph.inputs(v).tolist()) | set(graph.control_inputs(v).tolist()) for v in range(n)]

    def rec(done, order):
        if len(order) == n:
            yield list(order)
            return
        for v in range(n):
            if v not in done and preds[v] <= done:
                done.add(v)
                order.append(v)
                yield from rec(done, order)
                order.pop()
                done.discard(v)

    yield from rec(set(), [])


def brute_force_peak(graph, num_devices):
    """Minimum peak over every placement and every topological order (tiny graphs only)."""
    n = graph.num_nodes
    orders = list(all_topological_orders(graph))
    best = None
    for placement in itertools.product(range(num_devices), repeat=n):
        if num_devices > 1 and placement[0] != 0:
            continue  # device symmetry: node 0 on device 0 loses nothing
        for order in orders:
            p, _ = simulate(graph, list(placement), order, num_devices)
            if best is None or p < best:
                best = p
    return best
