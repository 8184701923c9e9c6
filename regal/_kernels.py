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

_JIT = dict(nogil=True, cache=True)


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
def _heap_push(hkey, hnode, size, key, node):
    """Push (key, node) on a max-heap kept in two arrays; ties go to the lower node index."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        kp = hkey[parent]
        if key > kp or (key == kp and node < hnode[parent]):
            hkey[i] = kp
            hnode[i] = hnode[parent]
            i = parent
        else:
            break
    hkey[i] = key
    hnode[i] = node
    return size + 1


@numba.njit(**_JIT)
def _heap_pop(hkey, hnode, size):
    """Remove the top of the heap; returns (node, new size)."""
    top = hnode[0]
    size -= 1
    key = hkey[size]
    node = hnode[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size:
            k1 = hkey[c + 1]
            k0 = hkey[c]
            if k1 > k0 or (k1 == k0 and hnode[c + 1] < hnode[c]):
                c += 1
        kc = hkey[c]
        if kc > key or (kc == key and hnode[c] < node):
            hkey[i] = kc
            hnode[i] = hnode[c]
            i = c
        else:
            break
    hkey[i] = key
    hnode[i] = node
    return top, size


@numba.njit(**_JIT)
def priority_order(prio, n, pred_cnt, succ_ptr, succ_idx, resident, order):
    """Kahn's algorithm taking the ready node of highest prio (ties to the lower index).

    prio: float64[n]. Writes order: int32[n]; returns the number of nodes ordered (n for a DAG).
    The ready set is a binary max-heap holding keys inline (no indirect loads when sifting).
    Resident nodes (no inputs, ready from the start, often hundreds of weights) wait in a list
    sorted once by (priority desc, index) instead, and each step takes the higher of the two
    heads: the same order, with a heap that stays small.
    """
    indeg = pred_cnt.copy()
    hkey = np.empty(n, dtype=np.float64)
    hnode = np.empty(n, dtype=np.int32)
    size = 0
    num_res = 0
    for v in range(n):
        if resident[v]:
            num_res += 1
    res_key = np.empty(num_res, dtype=np.float64)
    res_node = np.empty(num_res, dtype=np.int32)
    j = 0
    for v in range(n):
        if resident[v]:
            res_key[j] = -prio[v]
            res_node[j] = v
            j += 1
        elif indeg[v] == 0:
            size = _heap_push(hkey, hnode, size, prio[v], v)
    by_prio = np.argsort(res_key, kind="mergesort")  # stable: equal keys keep increasing index
    next_res = 0
    t = 0
    while size > 0 or next_res < num_res:
        take_res = False
        if next_res < num_res:
            r = res_node[by_prio[next_res]]
            if size == 0:
                take_res = True
            else:
                pr = prio[r]
                top = hkey[0]
                take_res = pr > top or (pr == top and r < hnode[0])
        if take_res:
            v = res_node[by_prio[next_res]]
            next_res += 1
        else:
            v, size = _heap_pop(hkey, hnode, size)
        order[t] = v
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                size = _heap_push(hkey, hnode, size, prio[w], w)
    return t


@numba.njit(**_JIT)
def longest_path_levels(order, succ_ptr, succ_idx, from_sources, to_sinks):
    """Longest-path level of each node from the sources and to the sinks, in edges.

    order: int32[n] topological; writes from_sources and to_sinks: int64[n] (zero-initialised).
    """
    n = order.shape[0]
    for t in range(n):
        v = order[t]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            if from_sources[v] + 1 > from_sources[w]:
                from_sources[w] = from_sources[v] + 1
    for t in range(n - 1, -1, -1):
        v = order[t]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            if to_sinks[w] + 1 > to_sinks[v]:
                to_sinks[v] = to_sinks[w] + 1


@numba.njit(**_JIT)
def simulate_peak(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                  nbytes, temp, resident, device_peak, trace):
    """Peak memory of a placement and global order under SPEC.md section 3.

    order: int32[n] topological; placement: int32[n] in [0, d); in_bytes: int64[E] and
    in_resident: bool[E] are the bytes and resident flag of each data edge's producer (per-edge
    copies, read sequentially). Writes device_peak: int64[d]
    and returns max(device_peak). trace: int64[n, d] or int64[0, d]; when it has n rows, row t
    receives every device's bytes while step t runs (temp included on the running device).
    """
    tracing = trace.shape[0] > 0
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
                if tracing:
                    trace[t, 0] = r
                continue
            r += nbytes[v] + temp[v]
            if r > peak:
                peak = r
            if tracing:
                trace[t, 0] = r
            r -= temp[v]
            for e in range(in_ptr[v], in_ptr[v + 1]):
                u = in_idx[e]
                remaining[u] -= 1
                if remaining[u] == 0 and not resident[u]:
                    r -= nbytes[u]
        device_peak[0] = peak
        return peak

    # One record per node, so that an input's whole state is one cache line:
    #   st[u, 0]            u's home device
    #   st[u, 1]            devices other than home that host a consumer of u and lack the copy
    #   st[u, 2 + k]        consumers of u on device k that have not run yet
    #   st[u, 2 + d + k]    for a remote k: u's copy has arrived; for k = home: u has been freed
    # Each step walks its inputs once: copies in, and the frees it causes, which are applied
    # after the peak is taken (an input's state depends only on its own iteration). The updates
    # are written without branches: placements are random, so branches would mispredict.
    W = 2 + 2 * d
    st = np.zeros((n, W), dtype=np.int32)
    for v in range(n):
        st[v, 0] = placement[v]
    for u in range(n):
        h = st[u, 0]
        for e in range(out_ptr[u], out_ptr[u + 1]):
            k = st[out_idx[e], 0]
            c = st[u, 2 + k]
            st[u, 1] += (c == 0) & (k != h)
            st[u, 2 + k] = c + 1

    for t in range(n):
        v = order[t]
        if resident[v]:
            if tracing:
                for j in range(d):
                    trace[t, j] = res[j]
            continue
        k = st[v, 0]
        r = res[k]
        freed = 0
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            b = in_bytes[e]
            h = st[u, 0]
            remote = h != k
            # 1. copy in
            need = remote & (st[u, 2 + d + k] == 0)
            st[u, 2 + d + k] |= need
            r += b * need
            pend = st[u, 1] - need
            st[u, 1] = pend
            # 3. free (deferred): the copy on k after its last consumer there; the home copy
            # once every home consumer has run and every other device has its copy
            left = st[u, 2 + k] - 1
            st[u, 2 + k] = left
            freed += b * (remote & (left == 0))
            free_home = (not in_resident[e]) & (pend == 0) & (st[u, 2 + h] == 0) & (st[u, 2 + d + h] == 0)
            st[u, 2 + d + h] |= free_home
            freed += b * (free_home & (not remote))
            res[h] -= b * (free_home & remote)
        # 2. run
        r += nbytes[v]
        if r + temp[v] > device_peak[k]:
            device_peak[k] = r + temp[v]
        if tracing:
            res[k] = r + temp[v]
            for j in range(d):
                trace[t, j] = res[j]
        res[k] = r - freed

    peak = device_peak[0]
    for k in range(1, d):
        if device_peak[k] > peak:
            peak = device_peak[k]
    return peak


@numba.njit(**_JIT)
def decode_simulate(keys, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, in_bytes, in_resident,
                    out_ptr, out_idx, nbytes, temp, resident, placement, order, device_peak, no_trace):
    """Decode one chromosome (SPEC.md section 5) and return its peak memory (section 3).

    keys: float64[n*(d+1)], node v's affinities at keys[v*(d+1) : v*(d+1)+d], its priority at
    keys[v*(d+1)+d]. Writes placement int32[n], order int32[n], device_peak int64[d].
    """
    placement_from_keys(keys, n, d, placement)
    prio = np.empty(n, dtype=np.float64)
    w = d + 1
    for v in range(n):
        prio[v] = keys[v * w + d]
    priority_order(prio, n, pred_cnt, succ_ptr, succ_idx, resident, order)
    return simulate_peak(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                         nbytes, temp, resident, device_peak, no_trace)


@numba.njit(parallel=True, nogil=True, cache=True)
def evaluate_population(population, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, in_bytes,
                        in_resident, out_ptr, out_idx, nbytes, temp, resident, fitness):
    """fitness[i] = peak memory of chromosome population[i]; chromosomes decoded in parallel.

    population: float64[m, n*(d+1)]; fitness: float64[m]. Each chromosome is decoded on its own,
    so the result does not depend on the number of threads.
    """
    m = population.shape[0]
    no_trace = np.empty((0, d), dtype=np.int64)
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        device_peak = np.empty(d, dtype=np.int64)
        fitness[i] = decode_simulate(population[i], n, d, pred_cnt, succ_ptr, succ_idx, in_ptr,
                                     in_idx, in_bytes, in_resident, out_ptr, out_idx, nbytes, temp,
                                     resident, placement, order, device_peak, no_trace)


@numba.njit(parallel=True, nogil=True, cache=True)
def biased_crossover(population, elite_parent, other_parent, coin, inherit, children):
    """children[j] takes gene g from population[elite_parent[j]] when coin[j, g] < inherit[g],
    else from population[other_parent[j]] (Goncalves and Resende's parametrized uniform crossover).

    coin: uint16[m, L] uniform random; inherit: int32[L], the inheritance probability times 65536.
    """
    m, L = children.shape
    for j in numba.prange(m):
        a = population[elite_parent[j]]
        b = population[other_parent[j]]
        c = coin[j]
        out = children[j]
        for g in range(L):
            out[g] = a[g] if c[g] < inherit[g] else b[g]


@numba.njit(**_JIT)
def dfs_postorder(roots, child_ptr, child_idx, n, order):
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
