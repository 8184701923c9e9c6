"""Every Numba kernel of regal: decode a chromosome and simulate peak memory (SPEC.md sections 3, 5).

Arrays and scalars in, arrays out. No Python objects, no RNG, no formatted errors: the public
wrappers in `regal.decode` and `regal.simulate` validate first. The reference twins of these
kernels, written for clarity instead of speed, are in `tests/naive.py`.

Graph arrays used below (n nodes, d devices):
    pred_cnt:  int32[n]    number of distinct predecessors (data and control)
    succ_ptr:  int64[n+1], succ_idx: int32[*]   successors (data and control), CSR
    in_ptr:    int64[n+1], in_idx: int32[*]     data inputs, CSR
    out_ptr:   int64[n+1], out_idx: int32[*]    data consumers, CSR
    nbytes, temp: int64[n];  resident: bool[n]
"""

import numba
import numpy as np

_JIT = dict(nopython=True, nogil=True, cache=True)


@numba.njit(**_JIT)
def placement_from_keys(keys, n, d, placement):
    """placement[v] = argmax of node v's d affinity keys, ties to the lower device."""
    w = d + 1
    for v in range(n):
        base = v * w
        best = 0
        bk = keys[base]
        for j in range(1, d):
            if keys[base + j] > bk:
                bk = keys[base + j]
                best = j
        placement[v] = best


@numba.njit(**_JIT)
def _heap_before(prio, a, b):
    """True when node a must be taken before node b: higher priority, ties to the lower index."""
    pa = prio[a]
    pb = prio[b]
    return pa > pb or (pa == pb and a < b)


@numba.njit(**_JIT)
def _heap_push(heap, size, v, prio):
    i = size
    heap[i] = v
    while i > 0:
        parent = (i - 1) >> 1
        if _heap_before(prio, heap[i], heap[parent]):
            t = heap[i]
            heap[i] = heap[parent]
            heap[parent] = t
            i = parent
        else:
            break
    return size + 1


@numba.njit(**_JIT)
def _heap_pop(heap, size, prio):
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        if left + 1 < size and _heap_before(prio, heap[left + 1], heap[left]):
            c = left + 1
        if _heap_before(prio, heap[c], heap[i]):
            t = heap[i]
            heap[i] = heap[c]
            heap[c] = t
            i = c
        else:
            break
    return top, size


@numba.njit(**_JIT)
def priority_order(prio, n, pred_cnt, succ_ptr, succ_idx, order):
    """Kahn's algorithm taking the ready node of highest prio (ties to the lower index).

    prio: float64[n]. Writes order: int32[n]; returns the number of nodes ordered (n for a DAG).
    """
    indeg = pred_cnt.copy()
    heap = np.empty(n, dtype=np.int32)
    size = 0
    for v in range(n):
        if indeg[v] == 0:
            size = _heap_push(heap, size, v, prio)
    t = 0
    while size > 0:
        v, size = _heap_pop(heap, size, prio)
        order[t] = v
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                size = _heap_push(heap, size, w, prio)
    return t


@numba.njit(**_JIT)
def simulate_peak(order, placement, n, d, in_ptr, in_idx, out_ptr, out_idx,
                  nbytes, temp, resident, device_peak):
    """Peak memory of a placement and global order under SPEC.md section 3.

    order: int32[n] topological; placement: int32[n] in [0, d). Writes device_peak: int64[d]
    and returns max(device_peak).
    """
    res = np.zeros(d, dtype=np.int64)
    for v in range(n):
        if resident[v]:
            res[placement[v]] += nbytes[v]
    for k in range(d):
        device_peak[k] = res[k]

    if d == 1:
        # One device: no copies; a tensor is freed when its last consumer has run.
        remaining = np.empty(n, dtype=np.int32)
        for u in range(n):
            remaining[u] = out_ptr[u + 1] - out_ptr[u]
        r = res[0]
        peak = device_peak[0]
        for t in range(n):
            v = order[t]
            if resident[v]:
                continue
            r += nbytes[v] + temp[v]
            if r > peak:
                peak = r
            r -= temp[v]
            for e in range(in_ptr[v], in_ptr[v + 1]):
                u = in_idx[e]
                remaining[u] -= 1
                if remaining[u] == 0 and not resident[u]:
                    r -= nbytes[u]
        device_peak[0] = peak
        return peak

    # remaining[u*d + k]: consumers of u placed on k that have not run yet.
    remaining = np.zeros(n * d, dtype=np.int32)
    for u in range(n):
        for e in range(out_ptr[u], out_ptr[u + 1]):
            remaining[u * d + placement[out_idx[e]]] += 1
    # pending[u]: devices other than u's home that host a consumer and lack their copy.
    pending = np.zeros(n, dtype=np.int32)
    for u in range(n):
        h = placement[u]
        for k in range(d):
            if k != h and remaining[u * d + k] > 0:
                pending[u] += 1
    present = np.zeros(n * d, dtype=np.bool_)  # remote copies only
    freed = np.zeros(n, dtype=np.bool_)

    for t in range(n):
        v = order[t]
        if resident[v]:
            continue
        k = placement[v]
        # 1. copy in
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if placement[u] != k and not present[u * d + k]:
                present[u * d + k] = True
                res[k] += nbytes[u]
                pending[u] -= 1
        # 2. run
        res[k] += nbytes[v] + temp[v]
        if res[k] > device_peak[k]:
            device_peak[k] = res[k]
        res[k] -= temp[v]
        # 3. free
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            h = placement[u]
            slot = u * d + k
            remaining[slot] -= 1
            if h != k and remaining[slot] == 0:
                res[k] -= nbytes[u]
            if (not resident[u] and not freed[u] and remaining[u * d + h] == 0
                    and pending[u] == 0):
                freed[u] = True
                res[h] -= nbytes[u]

    peak = device_peak[0]
    for k in range(1, d):
        if device_peak[k] > peak:
            peak = device_peak[k]
    return peak


@numba.njit(**_JIT)
def decode_simulate(keys, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                    nbytes, temp, resident, placement, order, device_peak):
    """Decode one chromosome (SPEC.md section 5) and return its peak memory (section 3).

    keys: float64[n*(d+1)], node v's affinities at keys[v*(d+1) : v*(d+1)+d], its priority at
    keys[v*(d+1)+d]. Writes placement int32[n], order int32[n], device_peak int64[d].
    """
    placement_from_keys(keys, n, d, placement)
    prio = np.empty(n, dtype=np.float64)
    w = d + 1
    for v in range(n):
        prio[v] = keys[v * w + d]
    priority_order(prio, n, pred_cnt, succ_ptr, succ_idx, order)
    return simulate_peak(order, placement, n, d, in_ptr, in_idx, out_ptr, out_idx,
                         nbytes, temp, resident, device_peak)


@numba.njit(parallel=True, nogil=True, cache=True)
def evaluate_population(population, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx,
                        out_ptr, out_idx, nbytes, temp, resident, fitness):
    """fitness[i] = peak memory of chromosome population[i]; chromosomes decoded in parallel.

    population: float64[m, n*(d+1)]; fitness: float64[m]. Each chromosome is decoded on its own,
    so the result does not depend on the number of threads.
    """
    m = population.shape[0]
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        device_peak = np.empty(d, dtype=np.int64)
        fitness[i] = decode_simulate(population[i], n, d, pred_cnt, succ_ptr, succ_idx, in_ptr,
                                     in_idx, out_ptr, out_idx, nbytes, temp, resident,
                                     placement, order, device_peak)


@numba.njit(**_JIT)
def biased_crossover(population, elite_parent, other_parent, coin, inherit, children):
    """children[j] takes gene g from population[elite_parent[j]] when coin[j, g] < inherit[g],
    else from population[other_parent[j]] (Goncalves and Resende's parametrized uniform crossover).
    """
    m, L = children.shape
    for j in range(m):
        a = population[elite_parent[j]]
        b = population[other_parent[j]]
        c = coin[j]
        out = children[j]
        for g in range(L):
            out[g] = a[g] if c[g] < inherit[g] else b[g]
