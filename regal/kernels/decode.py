"""The BRKGA decoder's kernels and the search helpers around the simulator: decode a chromosome
and score it (SPEC.md sections 5, 3), the population in parallel, biased crossover; Kahn's order
by priority, longest-path levels; the local search's small kernels (live tensors, peak hits,
feasible windows, shifts) and the re-homing of resident tensors on a step trace.

Arrays and scalars in, arrays out; the graph as one struct, `g`, a
`regal.kernels.structs.KernelGraph` (its fields and dtypes are listed there). No Python objects,
no formatted errors: the public wrappers in `regal.decode`, `regal.simulate`,
`regal.heuristics` and `regal.local_search` validate first. The other kernel modules: the
peak-memory simulator `regal.kernels.peak_memory`, the heuristic orders `regal.kernels.orders`, the local
search's climb `regal.kernels.climb`; JIT options from `regal._jit`, the ready sets (binary heap,
sorted array) from `regal.kernels.heap`. The reference twins of these kernels, written for clarity instead of speed, are
in `tests/naive.py`.
"""

import numba
import numpy as np

from regal.kernels.heap import heap_pop, heap_push, sorted_push, sorted_to_heap
from regal._jit import JIT as _JIT, PARALLEL_JIT
from regal.kernels.peak_memory import simulate_peak


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


#: The ready set of `priority_order` is a sorted array while it holds at most this many nodes
#: (an insertion shifts a few entries; the top is the last one, so a pop is one decrement), a
#: binary heap once it grows past it (a wide graph's ready set: O(log n) per operation).
READY_SORTED_MAX = 64
#: Resident nodes are sorted by bucketing their priorities (keys in [0, 1)) into about as many
#: buckets as there are residents, then one insertion pass; when a bucket would hold more than
#: this many (equal or non-random priorities), by merge sort instead.
RESIDENT_BUCKET_MAX = 8


@numba.njit(**_JIT)
def _residents_by_priority(prio, resident, n):
    """The resident nodes in taking order, (priority float64[r], node int32[r]): priority
    descending, ties to the lower index (the order a stable sort of -prio gives)."""
    num_res = 0
    for v in range(n):
        num_res += resident[v]
    res_key = np.empty(num_res, dtype=np.float64)
    res_node = np.empty(num_res, dtype=np.int32)
    nb = 16
    while nb < num_res:
        nb *= 2
    start = np.zeros(nb + 1, dtype=np.int64)
    bucketed = True
    for v in range(n):
        if resident[v]:
            k = prio[v]
            if not (k >= 0.0 and k < 1.0):
                bucketed = False
                break
            b = nb - 1 - int(k * nb)  # the highest keys first
            start[b + 1] += 1
            if start[b + 1] > RESIDENT_BUCKET_MAX:
                bucketed = False
                break
    if not bucketed:
        j = 0
        for v in range(n):
            if resident[v]:
                res_key[j] = -prio[v]
                res_node[j] = v
                j += 1
        by_prio = np.argsort(res_key, kind="mergesort")  # stable: equal keys keep increasing index
        out_node = np.empty(num_res, dtype=np.int32)
        for j in range(num_res):
            out_node[j] = res_node[by_prio[j]]
            res_key[j] = prio[out_node[j]]
        return res_key, out_node
    for b in range(nb):
        start[b + 1] += start[b]
    for v in range(n):
        if resident[v]:
            b = nb - 1 - int(prio[v] * nb)
            res_key[start[b]] = prio[v]
            res_node[start[b]] = v
            start[b] += 1
    for a in range(1, num_res):  # within buckets only: a few entries each
        k = res_key[a]
        x = res_node[a]
        i = a
        while i > 0 and (res_key[i - 1] < k or (res_key[i - 1] == k and res_node[i - 1] > x)):
            res_key[i] = res_key[i - 1]
            res_node[i] = res_node[i - 1]
            i -= 1
        res_key[i] = k
        res_node[i] = x
    return res_key, res_node


@numba.njit(**_JIT)
def priority_order(prio, n, pred_cnt, succ_ptr, succ_idx, resident, order):
    """Kahn's algorithm taking the ready node of highest prio (ties to the lower index).

    prio: float64[n]. Writes order: int32[n]; returns the number of nodes ordered (n for a DAG).
    The ready set holds keys inline (no indirect loads): a sorted array while small, a binary
    max-heap past READY_SORTED_MAX. Resident nodes (no inputs, ready from the start, often
    hundreds of weights) wait in a list sorted once by (priority desc, index) instead, and each
    step takes the higher of the two heads: the same order, with a ready set that stays small.
    """
    indeg = pred_cnt.copy()
    hkey = np.empty(n, dtype=np.float64)
    hnode = np.empty(n, dtype=np.int32)
    size = 0
    is_heap = False
    for v in range(n):
        is_heap |= prio[v] != prio[v]  # a NaN orders no array: the heap alone, as it always did
    res_key, res_node = _residents_by_priority(prio, resident, n)
    num_res = res_node.shape[0]
    for v in range(n):
        if not resident[v] and indeg[v] == 0:
            if is_heap:
                size = heap_push(hkey, hnode, 0, size, prio[v], v)
            else:
                size = sorted_push(hkey, hnode, size, prio[v], v)
                if size > READY_SORTED_MAX:
                    sorted_to_heap(hkey, hnode, size)
                    is_heap = True
    next_res = 0
    t = 0
    while size > 0 or next_res < num_res:
        take_res = False
        if next_res < num_res:
            if size == 0:
                take_res = True
            else:
                top_i = 0 if is_heap else size - 1
                pr = res_key[next_res]
                top = hkey[top_i]
                take_res = pr > top or (pr == top and res_node[next_res] < hnode[top_i])
        if take_res:
            v = res_node[next_res]
            next_res += 1
        elif is_heap:
            v, size = heap_pop(hkey, hnode, 0, size)
        else:
            size -= 1
            v = hnode[size]
        order[t] = v
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                if is_heap:
                    size = heap_push(hkey, hnode, 0, size, prio[w], w)
                else:
                    size = sorted_push(hkey, hnode, size, prio[w], w)
                    if size > READY_SORTED_MAX:
                        sorted_to_heap(hkey, hnode, size)
                        is_heap = True
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
def live_across(g, order, pos, placement, t, k, cand, last):
    """The tensors held on device k across step t: the non-resident nodes on k with bytes,
    run before t (pos < t) and last consumed after it (a consumer at a position > t), or graph
    outputs (`output`, never freed: their `last` is n, past every step).

    order, pos: int32[n] / int64[n] (pos[order[i]] = i); writes the first m entries of cand
    (int64[n], node) and last (int64[n], the position of the node's last consumer); returns m.
    The local search's directed moves (`regal.local_search`) pick from them.
    """
    m = 0
    for i in range(t):
        u = order[i]
        if placement[u] != k or g.resident[u] or g.nbytes[u] == 0:
            continue
        hi = -1
        if g.output[u]:
            hi = order.shape[0]
        for e in range(g.out_ptr[u], g.out_ptr[u + 1]):
            q = pos[g.out_idx[e]]
            if q > hi:
                hi = q
        if hi > t:
            cand[m] = u
            last[m] = hi
            m += 1
    return m



@numba.njit(**_JIT)
def _block_max(val, lazy, bmax, blk, k, lo, hi):
    """max of device k's bytes over steps [lo, hi] (-1 when empty) in the blocked trace of
    `pack_residents` (val + the block's lazy add; bmax: each block's max of val)."""
    m = np.int64(-1)
    t = lo
    while t <= hi:
        j = t // blk
        if t % blk == 0 and t + blk - 1 <= hi:
            if bmax[k, j] + lazy[k, j] > m:
                m = bmax[k, j] + lazy[k, j]
            t += blk
        else:
            if val[k, t] + lazy[k, j] > m:
                m = val[k, t] + lazy[k, j]
            t += 1
    return m


@numba.njit(**_JIT)
def _block_add(val, lazy, bmax, blk, k, lo, hi, delta):
    """Add delta to device k's bytes over steps [lo, hi] in the blocked trace."""
    n = val.shape[1]
    t = lo
    while t <= hi:
        j = t // blk
        if t % blk == 0 and t + blk - 1 <= hi:
            lazy[k, j] += delta
            t += blk
        else:
            end = min(hi, (j + 1) * blk - 1)
            for u in range(t, end + 1):
                val[k, u] += delta
            m = np.int64(-1)
            for u in range(j * blk, min(n, (j + 1) * blk)):
                if val[k, u] > m:
                    m = val[k, u]
            bmax[k, j] = m
            t = end + 1


@numba.njit(**_JIT)
def _peak_without(val, lazy, bmax, blk, k, lo, hi, delta):
    """Device k's peak if its bytes change by delta at every step outside [lo, hi] (lo > hi: at
    every step)."""
    n = val.shape[1]
    out = max(_block_max(val, lazy, bmax, blk, k, 0, min(lo, n) - 1),
              _block_max(val, lazy, bmax, blk, k, max(hi + 1, 0), n - 1))
    inside = _block_max(val, lazy, bmax, blk, k, lo, hi)
    if out >= 0 and out + delta > inside:
        return out + delta
    return inside


@numba.njit(**_JIT)
def pack_residents(g, trace, pos, placement, candidates, span):
    """Re-home resident tensors, in the order of `candidates`, each to the device where the
    schedule's (max device peak, sum of device peaks) falls most, if it falls; returns how many
    moved. The order is fixed. trace: int64[n, d], the schedule's step trace (`simulate_peak`'s),
    kept as blocks of about sqrt(n) steps with a lazy add each, so a move is priced and made in
    O(d sqrt(n)), computed, not simulated: a resident tensor's home holds it at every step,
    another device a copy from its first consumer there to its last (SPEC.md section 3).
    pos: int64[n], each node's step; placement: int32[n], updated; span: int64[d, 2], scratch."""
    n, d = trace.shape
    blk = max(1, int(np.sqrt(n)))
    nb = (n + blk - 1) // blk
    val = np.ascontiguousarray(trace.T)
    lazy = np.zeros((d, nb), dtype=np.int64)
    bmax = np.full((d, nb), -1, dtype=np.int64)
    peaks = np.zeros(d, dtype=np.int64)
    for k in range(d):
        for t in range(n):
            if val[k, t] > bmax[k, t // blk]:
                bmax[k, t // blk] = val[k, t]
            if val[k, t] > peaks[k]:
                peaks[k] = val[k, t]
    moved = 0
    for i in range(candidates.shape[0]):
        r = candidates[i]
        b = g.nbytes[r]
        a = placement[r]
        if b == 0:
            continue
        for k in range(d):
            span[k, 0] = n
            span[k, 1] = -1
        for e in range(g.out_ptr[r], g.out_ptr[r + 1]):
            c = g.out_idx[e]
            k = placement[c]
            q = pos[c]
            if q < span[k, 0]:
                span[k, 0] = q
            if q > span[k, 1]:
                span[k, 1] = q
        cur_max = np.int64(0)
        cur_sum = np.int64(0)
        for k in range(d):
            cur_max = max(cur_max, peaks[k])
            cur_sum += peaks[k]
        new_a = _peak_without(val, lazy, bmax, blk, a, span[a, 0], span[a, 1], -b)
        best_k = -1
        best_max = cur_max
        best_sum = cur_sum
        best_peak = np.int64(0)
        for k in range(d):
            if k == a:
                continue
            new_k = _peak_without(val, lazy, bmax, blk, k, span[k, 0], span[k, 1], b)
            m = max(new_a, new_k)
            s = cur_sum - peaks[a] - peaks[k] + new_a + new_k
            for j in range(d):
                if j != a and j != k and peaks[j] > m:
                    m = peaks[j]
            if m < best_max or (m == best_max and s < best_sum):
                best_k, best_max, best_sum, best_peak = k, m, s, new_k
        if best_k < 0:
            continue
        for side in range(2):
            k = a if side == 0 else best_k
            delta = -b if side == 0 else b
            lo = min(span[k, 0], n)
            hi = max(span[k, 1], -1)
            if lo > hi:
                _block_add(val, lazy, bmax, blk, k, 0, n - 1, delta)
            else:
                _block_add(val, lazy, bmax, blk, k, 0, lo - 1, delta)
                _block_add(val, lazy, bmax, blk, k, hi + 1, n - 1, delta)
        peaks[a] = new_a
        peaks[best_k] = best_peak
        placement[r] = best_k
        moved += 1
    for k in range(d):
        for t in range(n):
            trace[t, k] = val[k, t] + lazy[k, t // blk]
    return moved

@numba.njit(**_JIT)
def steps_at_peak(trace, order, resident, peak):
    """How many (step, device) entries of trace (int64[n, d]) equal peak, over the steps that
    run a non-resident node (a resident node's step repeats the one before it). The local
    search's third score component."""
    m = 0
    for t in range(trace.shape[0]):
        if resident[order[t]]:
            continue
        for k in range(trace.shape[1]):
            if trace[t, k] == peak:
                m += 1
    return m


@numba.njit(**_JIT)
def peak_hits(trace, peak, hits):
    """The (step, device) entries of trace (int64[n, d]) equal to peak, in row-major order (as
    numpy.argwhere lists them), written to hits (int64[n * d, 2]); returns how many."""
    m = 0
    for t in range(trace.shape[0]):
        for k in range(trace.shape[1]):
            if trace[t, k] == peak:
                hits[m, 0] = t
                hits[m, 1] = k
                m += 1
    return m


@numba.njit(**_JIT)
def feasible_window(pred_ptr, pred_idx, succ_ptr, succ_idx, pos, v, n):
    """(lo, hi): the positions node v may take in an order with positions pos (int64[n]), after
    its last predecessor and before its first successor (data and control edges, CSR)."""
    lo = 0
    for e in range(pred_ptr[v], pred_ptr[v + 1]):
        q = pos[pred_idx[e]] + 1
        if q > lo:
            lo = q
    hi = n - 1
    for e in range(succ_ptr[v], succ_ptr[v + 1]):
        q = pos[succ_idx[e]] - 1
        if q < hi:
            hi = q
    return lo, hi


@numba.njit(**_JIT)
def shift_node(order, pos, p, q):
    """Move the node at position p of order (int32[n]) to position q; the nodes between slide by
    one; pos (int64[n], pos[order[i]] = i) follows."""
    v = order[p]
    if q < p:
        for i in range(p, q, -1):
            order[i] = order[i - 1]
    else:
        for i in range(p, q):
            order[i] = order[i + 1]
    order[q] = v
    for i in range(min(p, q), max(p, q) + 1):
        pos[order[i]] = i


@numba.njit(**_JIT)
def decode_simulate(g, keys, d, placement, order, device_peak, no_trace):
    """Decode one chromosome (SPEC.md section 5) and return its peak memory (section 3).

    g: the `KernelGraph` (n nodes); keys: float64[n*(d+1)], node v's affinities at
    keys[v*(d+1) : v*(d+1)+d], its priority at keys[v*(d+1)+d]. Writes placement int32[n],
    order int32[n], device_peak int64[d]; no_trace: int64[0, d].
    """
    n = g.num_nodes
    placement_from_keys(keys, n, d, placement)
    prio = np.empty(n, dtype=np.float64)
    w = d + 1
    for v in range(n):
        prio[v] = keys[v * w + d]
    priority_order(prio, n, g.pred_cnt, g.succ_ptr, g.succ_idx, g.resident, order)
    return simulate_peak(g, order, placement, d, device_peak, no_trace)


@numba.njit(**PARALLEL_JIT)
def evaluate_population(g, population, d, fitness):
    """fitness[i] = peak memory of chromosome population[i]; chromosomes decoded in parallel.

    g: the `KernelGraph` (n nodes); population: float64[m, n*(d+1)]; fitness: float64[m]. Each
    chromosome is decoded on its own, so the result does not depend on the number of threads.
    """
    m = population.shape[0]
    n = g.num_nodes
    no_trace = np.empty((0, d), dtype=np.int64)
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        device_peak = np.empty(d, dtype=np.int64)
        fitness[i] = decode_simulate(g, population[i], d, placement, order, device_peak, no_trace)


@numba.njit(**PARALLEL_JIT)
def biased_crossover(population, elite_parent, other_parent, coin, inherit, children):
    """children[j] takes gene g from population[elite_parent[j]] when coin[j, g] < inherit[g],
    else from population[other_parent[j]] (Goncalves and Resende's parametrized uniform crossover).

    population, children: the keys' bits (float64 arrays viewed as uint64: `brkga.ask` passes
    them so); coin: uint16[m, L] uniform random; inherit: int32[L], the inheritance probability
    times 65536. A gene is picked by a mask, not a branch: a coin falls either way with
    probabilities 0.7 / 0.3, which a branch predictor cannot learn (9x slower with a branch).
    """
    m, L = children.shape
    for j in numba.prange(m):
        a = population[elite_parent[j]]
        b = population[other_parent[j]]
        c = coin[j]
        out = children[j]
        for g in range(L):
            mask = np.uint64(0) - np.uint64(np.int32(c[g]) < inherit[g])
            out[g] = b[g] ^ ((a[g] ^ b[g]) & mask)
