"""Two floors for the comparison: greedy list scheduling, and random placement and order.

- `solve_greedy`: a greedy list scheduler that chooses node and device together on a running
  memory state (what a simple hand-written scheduler would do).
- `solve_random`: uniform placement and a random topological order (one random chromosome).
"""

from __future__ import annotations

import time

import numba
import numpy as np

from baselines.heuristics import _BIG, _JIT, _no_options
from baselines.partition import _check_devices
from regal.decode import order_by_priority
from regal.graph import Graph
from regal.simulate import kernel_graph
from regal.solution import Solution, make_solution

__all__ = ["solve_greedy", "solve_random", "greedy_schedule"]


@numba.njit(**_JIT)
def _greedy_kernel(n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                   nbytes, temp, resident, placement, order):
    """Greedy list scheduling over (ready node, device) pairs; see `greedy_schedule`."""
    present = np.zeros(n * d, dtype=np.bool_)
    left = np.empty(n, dtype=np.int64)  # unscheduled data consumers
    for u in range(n):
        left[u] = out_ptr[u + 1] - out_ptr[u]
        placement[u] = -1
    level = np.zeros(d, dtype=np.int64)     # bytes beyond the device's resident base
    dynpeak = np.zeros(d, dtype=np.int64)   # highest level so far
    rbase = np.zeros(d, dtype=np.int64)     # bytes of resident tensors placed on the device
    peak = np.int64(0)
    indeg = pred_cnt.copy()
    ready = np.empty(n, dtype=np.int32)
    cnt = 0
    t = 0
    for v in range(n):  # resident nodes are sources; they go first and are placed later
        if resident[v] and d == 1:
            placement[v] = 0
            present[v] = True
            rbase[0] += nbytes[v]
            peak = rbase[0]
        if indeg[v] == 0:
            if resident[v]:
                order[t] = v
                t += 1
            else:
                ready[cnt] = v
                cnt += 1
    for i in range(t):
        v = order[i]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[cnt] = w
                cnt += 1
    while cnt > 0:
        best = -1
        bk = 0
        s1 = _BIG
        s2 = _BIG
        s3 = _BIG
        for i in range(cnt):
            v = ready[i]
            # v's device: lowest (peak after, net bytes, memory while running, device)
            vk = -1
            f1 = _BIG
            f2 = _BIG
            f3 = _BIG
            fx = np.int64(0)
            for k in range(d):
                extra_r = np.int64(0)   # unplaced resident inputs that would be homed on k
                copy = np.int64(0)
                freed = np.int64(0)
                for e in range(in_ptr[v], in_ptr[v + 1]):
                    u = in_idx[e]
                    h = placement[u]
                    if h < 0:
                        extra_r += nbytes[u]
                        continue
                    here = present[u * d + k]
                    if not here:
                        copy += nbytes[u]
                    if left[u] == 1:
                        cnt_dev = 0
                        for j in range(d):
                            if present[u * d + j] or (j == k and not here):
                                if not (resident[u] and j == h):
                                    cnt_dev += 1
                        freed += nbytes[u] * cnt_dev
                run = rbase[k] + extra_r + level[k] + copy + nbytes[v] + temp[v]
                a = max(peak, rbase[k] + extra_r + dynpeak[k], run)
                b = copy + nbytes[v] - freed
                if vk < 0 or a < f1 or (a == f1 and (b < f2 or (b == f2 and run < f3))):
                    vk, f1, f2, f3, fx = k, a, b, run, extra_r
            # the node: the same key without the resident bytes it homes, a cost paid wherever
            # and whenever they are first read, so it steers the device but never delays a node
            run = f3 - fx
            a = max(peak, rbase[vk] + dynpeak[vk], run)
            if best < 0 or a < s1 or (a == s1 and (f2 < s2 or (f2 == s2 and (
                    run < s3 or (run == s3 and v < ready[best]))))):
                best, bk, s1, s2, s3 = i, vk, a, f2, run
        v = ready[best]
        k = bk
        cnt -= 1
        ready[best] = ready[cnt]
        placement[v] = k
        present[v * d + k] = True
        order[t] = v
        t += 1
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if placement[u] < 0:
                placement[u] = k
                present[u * d + k] = True
                rbase[k] += nbytes[u]
            elif not present[u * d + k]:
                present[u * d + k] = True
                level[k] += nbytes[u]
        level[k] += nbytes[v] + temp[v]
        if level[k] > dynpeak[k]:
            dynpeak[k] = level[k]
        level[k] -= temp[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            left[u] -= 1
            if left[u] == 0:
                for j in range(d):
                    if present[u * d + j] and not (resident[u] and j == placement[u]):
                        present[u * d + j] = False
                        level[j] -= nbytes[u]
        if rbase[k] + dynpeak[k] > peak:
            peak = rbase[k] + dynpeak[k]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[cnt] = w
                cnt += 1
    for v in range(n):  # resident tensors nobody reads: the device with the lowest peak
        if placement[v] < 0:
            k = 0
            for j in range(1, d):
                if rbase[j] + dynpeak[j] < rbase[k] + dynpeak[k]:
                    k = j
            placement[v] = k
            rbase[k] += nbytes[v]
    return t


def greedy_schedule(graph: Graph, devices: int) -> tuple[np.ndarray, np.ndarray]:
    """(placement int32[n], order int32[n]) of the greedy list scheduler (`solve_greedy`)."""
    kg = kernel_graph(graph)
    placement = np.empty(graph.num_nodes, dtype=np.int32)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    t = _greedy_kernel(kg.num_nodes, devices, kg.pred_cnt, kg.succ_ptr, kg.succ_idx, kg.in_ptr,
                       kg.in_idx, kg.out_ptr, kg.out_idx, kg.nbytes, kg.temp, kg.resident,
                       placement, order)
    assert t == graph.num_nodes
    return placement, order


def solve_greedy(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """Greedy list scheduling of nodes and devices together, on a running memory state.

    Resident nodes go first in the order. Then, at every step, every (ready node v, device k)
    pair is scored on the current state: the copies v needs on k, its output and temp give the
    memory while v runs; inputs whose last consumer is v are freed afterwards. Each ready node
    takes its best device by (peak of all devices after it, net bytes it adds, memory on k while
    it runs, device): keep the peak; among devices that do, add the least memory, which puts a
    node where its inputs live unless that would raise the peak when another device would not;
    then the emptier device. Among the ready nodes, the one run next minimises the same key
    (then node index) with the bytes of the resident tensors it homes left out (below).
    A resident tensor lives from the start on its home device. With one device that is device 0;
    with more it is homed on the device of its first reader (it then counts on that device from
    the start) or, if nobody reads it, on the lowest-peak device at the end. Its bytes are paid
    wherever and whenever it is first read, so they steer the device, never the node's turn.
    The running state frees a tensor, with all its copies, when its last consumer has run, since
    the devices of consumers not yet placed are unknown; the returned peak is the exact simulation.
    Deterministic (seed unused). O(n * ready * d * in-degree).
    """
    _no_options("greedy", options)
    _check_devices(devices)
    t0 = time.perf_counter()
    placement, order = greedy_schedule(graph, devices)
    return make_solution(graph, placement, order, devices, method="greedy", evaluations=1,
                         seconds=time.perf_counter() - t0, info={"seed": seed})


def solve_random(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """Uniform random placement and a random topological order (Kahn on uniform priorities).

    The same as decoding one uniform random chromosome (SPEC.md section 5); deterministic per
    seed. O(n log n + e).
    """
    _no_options("random", options)
    _check_devices(devices)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    placement = rng.integers(0, devices, size=n).astype(np.int32)
    order = order_by_priority(graph, rng.random(n))
    return make_solution(graph, placement, order, devices, method="random", evaluations=1,
                         seconds=time.perf_counter() - t0, info={"seed": seed})
