"""Every Numba kernel of regal: decode a chromosome, simulate peak memory (SPEC.md sections 3, 5),
the list schedulers behind `regal.heuristics` (XLA's list, Inductor's LPMF, greedy), and the
local search's climb (`climb`, the loop of `regal.local_search`).

Arrays and scalars in, arrays out. No Python objects (but the climb's numpy Generator), no
formatted errors: the public wrappers in `regal.decode`, `regal.simulate`, `regal.structure`,
`regal.heuristics` and `regal.local_search` validate first. JIT options come from `regal._jit`
(shared by every kernel module), the binary heap from `regal._heap`; the local search's climb
is in `regal._climb`. The reference twins of these kernels, written for clarity instead of
speed, are in `tests/naive.py`.

Graph arrays used below (n nodes, d devices):
    pred_cnt:  int32[n]    number of distinct predecessors (data and control)
    succ_ptr:  int64[n+1], succ_idx: int32[*]   successors (data and control), CSR
    in_ptr:    int64[n+1], in_idx: int32[*]     data inputs, CSR
    out_ptr:   int64[n+1], out_idx: int32[*]    data consumers, CSR
    nbytes, temp: int64[n];  resident: bool[n]
    reuse_ptr: int64[n+1], reuse_idx: int32[*]  inputs each node may take over (SPEC.md section 3),
                                                in preference order; empty for most graphs
"""

import numba
import numpy as np

from regal._heap import heap_pop, heap_push
from regal._jit import JIT as _JIT, PARALLEL_JIT


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
            size = heap_push(hkey, hnode, 0, size, prio[v], v)
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
            v, size = heap_pop(hkey, hnode, 0, size)
        order[t] = v
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                size = heap_push(hkey, hnode, 0, size, prio[w], w)
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
def _taken_one_device(v, reuse_ptr, reuse_idx, remaining, resident, nbytes):
    """Bytes of v's inputs that v takes over on one device (SPEC.md section 3, step 2): in
    preference order, each non-resident input whose last consumer is v (remaining == 1, before
    v's own decrement), while the total stays <= bytes(v)."""
    taken = 0
    for e in range(reuse_ptr[v], reuse_ptr[v + 1]):
        u = reuse_idx[e]
        if remaining[u] == 1 and not resident[u] and taken + nbytes[u] <= nbytes[v]:
            taken += nbytes[u]
    return taken


@numba.njit(**_JIT)
def _taken_on_device(v, k, d, reuse_ptr, reuse_idx, st, resident, nbytes):
    """The same with d devices, after v's inputs were walked: an input qualifies when its home is
    k (v's device) and this step frees its home copy (st[u, 2 + d + k] was set by this step: v
    is one of its home consumers, so it cannot have been set before)."""
    taken = 0
    for e in range(reuse_ptr[v], reuse_ptr[v + 1]):
        u = reuse_idx[e]
        if st[u, 0] == k and st[u, 2 + d + k] != 0 and not resident[u] and taken + nbytes[u] <= nbytes[v]:
            taken += nbytes[u]
    return taken


def _simulator(with_reuse):
    """simulate_peak's body, compiled twice: `with_reuse` is a compile-time constant, so graphs
    without the field run the code they ran before it existed (no branch per step)."""

    @numba.njit(**_JIT)
    def simulate(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                 nbytes, temp, resident, reuse_ptr, reuse_idx, device_peak, trace):
        """`simulate_peak` (see there), with or without taking over."""
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
                taken = 0
                if with_reuse:
                    taken = _taken_one_device(v, reuse_ptr, reuse_idx, remaining, resident, nbytes)
                r += nbytes[v] + temp[v] - taken
                if r > peak:
                    peak = r
                if tracing:
                    trace[t, 0] = r
                r += taken - temp[v]
                for e in range(in_ptr[v], in_ptr[v + 1]):
                    u = in_idx[e]
                    remaining[u] -= 1
                    if remaining[u] == 0 and not in_resident[e]:  # resident or a graph output: kept
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
            # 2. run (less the inputs v takes over: home copies on k that this step frees)
            taken = 0
            if with_reuse:
                taken = _taken_on_device(v, k, d, reuse_ptr, reuse_idx, st, resident, nbytes)
            r += nbytes[v] - taken
            if r + temp[v] > device_peak[k]:
                device_peak[k] = r + temp[v]
            if tracing:
                res[k] = r + temp[v]
                for j in range(d):
                    trace[t, j] = res[j]
            res[k] = r + taken - freed

        peak = device_peak[0]
        for k in range(1, d):
            if device_peak[k] > peak:
                peak = device_peak[k]
        return peak

    return simulate


_simulate_plain = _simulator(False)
_simulate_reuse = _simulator(True)


@numba.njit(**_JIT)
def simulate_peak(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                  nbytes, temp, resident, reuse_ptr, reuse_idx, device_peak, trace):
    """Peak memory of a placement and global order under SPEC.md section 3.

    order: int32[n] topological; placement: int32[n] in [0, d); in_bytes: int64[E] and
    in_resident: bool[E] are the bytes and resident flag of each data edge's producer (per-edge
    copies, read sequentially). Writes device_peak: int64[d]
    and returns max(device_peak). trace: int64[n, d] or int64[0, d]; when it has n rows, row t
    receives every device's bytes while step t runs (temp included on the running device).

    Taking over (`reuse`): a step that takes over inputs holds `taken` bytes fewer while it runs;
    after it, the bytes are as without the field (the taken inputs' bytes now belong to its
    output instead of being freed). A graph without the field runs `_simulate_plain`.
    """
    if reuse_idx.shape[0] > 0:
        return _simulate_reuse(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                               nbytes, temp, resident, reuse_ptr, reuse_idx, device_peak, trace)
    return _simulate_plain(order, placement, n, d, in_ptr, in_idx, in_bytes, in_resident, out_ptr, out_idx,
                           nbytes, temp, resident, reuse_ptr, reuse_idx, device_peak, trace)


@numba.njit(**_JIT)
def live_across(order, pos, placement, out_ptr, out_idx, nbytes, resident, output, t, k, cand, last):
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
        if placement[u] != k or resident[u] or nbytes[u] == 0:
            continue
        hi = -1
        if output[u]:
            hi = order.shape[0]
        for e in range(out_ptr[u], out_ptr[u + 1]):
            q = pos[out_idx[e]]
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
def pack_residents(trace, pos, placement, out_ptr, out_idx, nbytes, candidates, span):
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
        b = nbytes[r]
        a = placement[r]
        if b == 0:
            continue
        for k in range(d):
            span[k, 0] = n
            span[k, 1] = -1
        for e in range(out_ptr[r], out_ptr[r + 1]):
            c = out_idx[e]
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
def decode_simulate(keys, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, in_bytes, in_resident,
                    out_ptr, out_idx, nbytes, temp, resident, reuse_ptr, reuse_idx, placement, order,
                    device_peak, no_trace):
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
                         nbytes, temp, resident, reuse_ptr, reuse_idx, device_peak, no_trace)


@numba.njit(**PARALLEL_JIT)
def evaluate_population(population, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, in_bytes,
                        in_resident, out_ptr, out_idx, nbytes, temp, resident, reuse_ptr, reuse_idx, fitness):
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
                                     resident, reuse_ptr, reuse_idx, placement, order, device_peak, no_trace)


@numba.njit(**PARALLEL_JIT)
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


# ---------------------------------------------------------------------------- list schedulers
# The compiler heuristics and the greedy scheduler of `regal.heuristics` (its wrappers build the
# graph arrays and check that every node was ordered).

_BIG = np.int64(2 ** 62)
#: XLA's list scheduler ranks effective scalars (one element) first; a graph keeps no shapes, so
#: a node of 1 to SCALAR_BYTES bytes counts as one.
SCALAR_BYTES = 8


@numba.njit(**_JIT)
def _less3(a1, a2, a3, b1, b2, b3):
    return a1 < b1 or (a1 == b1 and (a2 < b2 or (a2 == b2 and a3 < b3)))


@numba.njit(**_JIT)
def _heap3_push(hk, hv, size, k1, k2, k3, v):
    """Push (k1, k2, k3) -> v on the binary min-heap hk: int64[cap, 3], hv: int64[cap] (keys
    compared lexicographically); returns the new size."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if not _less3(k1, k2, k3, hk[p, 0], hk[p, 1], hk[p, 2]):
            break
        hk[i, 0] = hk[p, 0]
        hk[i, 1] = hk[p, 1]
        hk[i, 2] = hk[p, 2]
        hv[i] = hv[p]
        i = p
    hk[i, 0] = k1
    hk[i, 1] = k2
    hk[i, 2] = k3
    hv[i] = v
    return size + 1


@numba.njit(**_JIT)
def _heap3_pop(hk, hv, size):
    """Remove the smallest entry (the root, hk[0] / hv[0], read it first); returns the new size."""
    size -= 1
    k1, k2, k3, v = hk[size, 0], hk[size, 1], hk[size, 2], hv[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _less3(hk[c + 1, 0], hk[c + 1, 1], hk[c + 1, 2], hk[c, 0], hk[c, 1], hk[c, 2]):
            c += 1
        if not _less3(hk[c, 0], hk[c, 1], hk[c, 2], k1, k2, k3):
            break
        hk[i, 0] = hk[c, 0]
        hk[i, 1] = hk[c, 1]
        hk[i, 2] = hk[c, 2]
        hv[i] = hv[c]
        i = c
    hk[i, 0] = k1
    hk[i, 1] = k2
    hk[i, 2] = k3
    hv[i] = v
    return size


@numba.njit(**_JIT)
def _xla_push(hk, hv, size, v, freed, nbytes, resident, out_ptr, stamp, scalar_bytes):
    """Push ready node v with its current priority (negated: the heap is a min-heap)."""
    if 0 < nbytes[v] <= scalar_bytes:
        p = _BIG
        nu = _BIG
    else:
        p = freed[v] - (0 if resident[v] else nbytes[v])
        nu = out_ptr[v + 1] - out_ptr[v]
    return _heap3_push(hk, hv, size, -p, -nu, -stamp[v], v)


@numba.njit(**_JIT)
def xla_list_order(n, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                   nbytes, resident, scalar_bytes, order):
    """XLA's ListScheduler: repeatedly run the ready node of highest priority.

    Priority = (bytes freed - bytes defined, number of users); effective scalars first. A
    buffer is freed by the node that is its last unscheduled use; parameters and constants
    (resident) are ignored on both sides. XLA keeps ready nodes in a multimap keyed by priority
    and takes the last entry, so among equal priorities the most recently (re)inserted wins;
    `stamp` reproduces that. scalar_bytes: the largest effective scalar (`SCALAR_BYTES`).
    The ready nodes are a heap with lazy deletion, as XLA's multimap: a node whose priority
    changes is pushed again with its new stamp, and an entry whose stamp is no longer its node's
    is dropped when it surfaces. Writes order: int32[n]; returns the number of nodes ordered.
    O((n + e) log n + e * max consumers).
    """
    uses = np.empty(n, dtype=np.int64)  # unscheduled uses of each buffer
    for u in range(n):
        uses[u] = out_ptr[u + 1] - out_ptr[u]
    freed = np.zeros(n, dtype=np.int64)  # bytes v frees if run now
    for v in range(n):
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if not resident[u] and uses[u] == 1:
                freed[v] += nbytes[u]
    indeg = pred_cnt.copy()
    scheduled = np.zeros(n, dtype=np.bool_)
    in_ready = np.zeros(n, dtype=np.bool_)
    stamp = np.zeros(n, dtype=np.int64)
    changed = np.full(n, -1, dtype=np.int64)  # the step at which a node's priority last rose
    cap = n + in_idx.shape[0] + 1
    hk = np.empty((cap, 3), dtype=np.int64)
    hv = np.empty(cap, dtype=np.int64)
    size = 0
    clock = 0
    for v in range(n):
        if indeg[v] == 0:
            in_ready[v] = True
            clock += 1
            stamp[v] = clock
            size = _xla_push(hk, hv, size, v, freed, nbytes, resident, out_ptr, stamp, scalar_bytes)
    t = 0
    while size > 0:
        v = hv[0]
        live = in_ready[v] and -hk[0, 2] == stamp[v]
        size = _heap3_pop(hk, hv, size)
        if not live:
            continue
        in_ready[v] = False
        scheduled[v] = True
        order[t] = v
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            uses[u] -= 1
            if uses[u] == 1 and not resident[u] and nbytes[u] > 0:
                for f in range(out_ptr[u], out_ptr[u + 1]):
                    w = out_idx[f]
                    if not scheduled[w]:
                        freed[w] += nbytes[u]
                        changed[w] = t
        # XLA then walks v's operands and their users, re-inserting (a new stamp) every ready
        # entry whose priority changed, once, in that walk's order
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            for f in range(out_ptr[u], out_ptr[u + 1]):
                w = out_idx[f]
                if in_ready[w] and changed[w] == t and not (0 < nbytes[w] <= scalar_bytes):
                    clock += 1
                    stamp[w] = clock
                    changed[w] = -1
                    size = _xla_push(hk, hv, size, w, freed, nbytes, resident, out_ptr, stamp, scalar_bytes)
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                in_ready[w] = True
                clock += 1
                stamp[w] = clock
                size = _xla_push(hk, hv, size, w, freed, nbytes, resident, out_ptr, stamp, scalar_bytes)
    return t


@numba.njit(**_JIT)
def _seg_set(tb, tv, width, i, b, v):
    """Set leaf i of the (b, v) min segment tree tb / tv (2 * width entries) and its ancestors."""
    j = i + width
    tb[j] = b
    tv[j] = v
    j >>= 1
    while j >= 1:
        l, r = 2 * j, 2 * j + 1
        if tb[r] < tb[l] or (tb[r] == tb[l] and tv[r] < tv[l]):
            tb[j] = tb[r]
            tv[j] = tv[r]
        else:
            tb[j] = tb[l]
            tv[j] = tv[l]
        j >>= 1


@numba.njit(**_JIT)
def _seg_min(tb, tv, width, lo, hi):
    """(b, v): the smallest (b, v) among leaves lo..hi-1 ((_BIG, _BIG) if all are empty)."""
    bb = _BIG
    bv = _BIG
    lo += width
    hi += width
    while lo < hi:
        if lo & 1:
            if tb[lo] < bb or (tb[lo] == bb and tv[lo] < bv):
                bb = tb[lo]
                bv = tv[lo]
            lo += 1
        if hi & 1:
            hi -= 1
            if tb[hi] < bb or (tb[hi] == bb and tv[hi] < bv):
                bb = tb[hi]
                bv = tv[hi]
        lo >>= 1
        hi >>= 1
    return bb, bv


@numba.njit(**_JIT)
def _seg_first(tb, width):
    """The first non-empty leaf (-1 if none)."""
    if tb[1] >= _BIG:
        return -1
    j = 1
    while j < width:
        j = 2 * j if tb[2 * j] < _BIG else 2 * j + 1
    return j - width


@numba.njit(**_JIT)
def lpmf_order(n, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
               nbytes, temp, resident, order):
    """Inductor's least-peak-memory-first (`topological_sort_lpmf`).

    For each ready node: mem1 = live + its output (+ temp here) is the memory while it runs,
    and size - memory_to_free is the change after. Pick the node minimising
    (max(mem1, max_memory_so_far), size - memory_to_free, index): while some node fits under the
    peak so far, the one leaving the least memory, else the one raising the peak least.
    Resident tensors are a constant offset (never freed); outputs are never freed.
    The ready nodes are leaves of a segment tree in order of (size + temp, index), each holding
    (size - memory_to_free, index): the nodes that fit are a prefix, so the pick is a prefix
    minimum, or, when none fits, the minimum among the nodes of the smallest size + temp.
    Writes order: int32[n]; returns the number of nodes ordered. O((n + e) log n + e * max consumers).
    """
    outdeg = np.empty(n, dtype=np.int64)
    live = np.int64(0)
    out_mem = np.int64(0)
    for u in range(n):
        outdeg[u] = out_ptr[u + 1] - out_ptr[u]
        if resident[u]:
            live += nbytes[u]
        elif outdeg[u] == 0:
            out_mem += nbytes[u]
            outdeg[u] = 1  # graph outputs keep an implicit use
    # Inductor starts its peak at max(freeable inputs, outputs); here no input is freeable and
    # the resident bytes are a constant offset on both
    max_mem = live + out_mem
    size = np.zeros(n, dtype=np.int64)
    to_free = np.zeros(n, dtype=np.int64)
    for v in range(n):
        if not resident[v]:
            size[v] = nbytes[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if not resident[u] and outdeg[u] == 1:
                to_free[v] += nbytes[u]
    run = size + temp
    by_run = np.argsort(run, kind="mergesort")   # leaves: (size + temp, index)
    sorted_run = run[by_run]
    rank = np.empty(n, dtype=np.int64)
    rank[by_run] = np.arange(n)
    width = 1
    while width < max(n, 1):
        width *= 2
    tb = np.full(2 * width, _BIG, dtype=np.int64)
    tv = np.full(2 * width, _BIG, dtype=np.int64)
    ready = np.zeros(n, dtype=np.bool_)
    indeg = pred_cnt.copy()
    cnt = 0
    for v in range(n):
        if indeg[v] == 0:
            ready[v] = True
            cnt += 1
            _seg_set(tb, tv, width, rank[v], size[v] - to_free[v], v)
    t = 0
    while cnt > 0:
        fits = np.searchsorted(sorted_run, max_mem - live, side="right")  # run[v] <= max_mem - live
        b, v = _seg_min(tb, tv, width, 0, fits)
        if v >= _BIG:   # nothing fits: the smallest size + temp, then the least size - to_free
            first = _seg_first(tb, width)
            r = sorted_run[first]
            hi = np.searchsorted(sorted_run, r, side="right")
            b, v = _seg_min(tb, tv, width, first, hi)
        ready[v] = False
        cnt -= 1
        _seg_set(tb, tv, width, rank[v], _BIG, _BIG)
        order[t] = v
        t += 1
        live += size[v] + temp[v]
        if live > max_mem:
            max_mem = live
        live -= temp[v] + to_free[v]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[w] = True
                cnt += 1
                _seg_set(tb, tv, width, rank[w], size[w] - to_free[w], w)
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if resident[u]:
                continue
            outdeg[u] -= 1
            if outdeg[u] == 1:
                for f in range(out_ptr[u], out_ptr[u + 1]):
                    w = out_idx[f]
                    to_free[w] += nbytes[u]
                    if ready[w]:
                        _seg_set(tb, tv, width, rank[w], size[w] - to_free[w], w)
    return t


@numba.njit(**_JIT)
def _greedy_taken(v, k, reuse_ptr, reuse_idx, placement, left, resident, nbytes):
    """What v would take over on device k in the greedy's running state (SPEC.md section 3,
    step 2): inputs homed on k whose last consumer is v, in preference order, while they fit."""
    taken = 0
    for e in range(reuse_ptr[v], reuse_ptr[v + 1]):
        u = reuse_idx[e]
        if placement[u] == k and left[u] == 1 and not resident[u] and taken + nbytes[u] <= nbytes[v]:
            taken += nbytes[u]
    return taken


@numba.njit(**_JIT)
def _greedy_terms(v, d, in_ptr, in_idx, placement, present, left, resident, nbytes, temp, has_reuse,
                  reuse_ptr, reuse_idx, cx, c2, cb):
    """Node v's terms in the greedy's score on the running state: cx[v] the bytes of its unplaced
    resident inputs; for each device k, c2[v*d+k] its copies in + output + temp - what it takes
    over, cb[v*d+k] its copies in + output - what its run frees (on every device)."""
    extra_r = np.int64(0)
    for e in range(in_ptr[v], in_ptr[v + 1]):
        if placement[in_idx[e]] < 0:
            extra_r += nbytes[in_idx[e]]
    cx[v] = extra_r
    for k in range(d):
        copy = np.int64(0)
        freed = np.int64(0)
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            h = placement[u]
            if h < 0:
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
        taken = np.int64(0)
        if has_reuse:
            taken = _greedy_taken(v, k, reuse_ptr, reuse_idx, placement, left, resident, nbytes)
        c2[v * d + k] = copy + nbytes[v] + temp[v] - taken
        cb[v * d + k] = copy + nbytes[v] - freed


@numba.njit(**_JIT)
def greedy_schedule(n, d, window, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                    nbytes, temp, resident, reuse_ptr, reuse_idx, placement, order, stop):
    """Greedy list scheduling over (ready node, device) pairs (`regal.heuristics.greedy_schedule`).

    `ready` holds the ready nodes in the order they became ready; each step scores the last
    `window` of them (all, while there are no more), so a step costs O(window * d * in-degree).
    Writes placement: int32[n] in [0, d) and order: int32[n]; returns the number of nodes ordered,
    fewer than n when another thread set stop[0] (int64[1]; read before every step) to nonzero.
    """
    has_reuse = reuse_idx.shape[0] > 0
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
    # each ready node's per-device terms, which change only when one of its inputs is placed,
    # copied, freed or loses a consumer: recomputed then (`dirty`), not at every step
    cx = np.zeros(n, dtype=np.int64)        # unplaced resident inputs (homed where v runs)
    c2 = np.zeros(n * d, dtype=np.int64)    # copies + output + temp - taken over, on device k
    cb = np.zeros(n * d, dtype=np.int64)    # copies + output - freed, on device k
    dirty = np.ones(n, dtype=np.bool_)
    while cnt > 0:
        if stop[0] != 0:
            return t
        best = -1
        bk = 0
        s1 = _BIG
        s2 = _BIG
        s3 = _BIG
        for i in range(max(cnt - window, 0), cnt):
            v = ready[i]
            if dirty[v]:
                dirty[v] = False
                _greedy_terms(v, d, in_ptr, in_idx, placement, present, left, resident, nbytes, temp,
                              has_reuse, reuse_ptr, reuse_idx, cx, c2, cb)
            # v's device: lowest (peak after, net bytes, memory while running, device)
            vk = -1
            f1 = _BIG
            f2 = _BIG
            f3 = _BIG
            extra_r = cx[v]
            for k in range(d):
                run = rbase[k] + extra_r + level[k] + c2[v * d + k]
                a = max(peak, rbase[k] + extra_r + dynpeak[k], run)
                b = cb[v * d + k]
                if vk < 0 or a < f1 or (a == f1 and (b < f2 or (b == f2 and run < f3))):
                    vk, f1, f2, f3 = k, a, b, run
            # the node: the same key without the resident bytes it homes, a cost paid wherever
            # and whenever they are first read, so it steers the device but never delays a node
            run = f3 - extra_r
            a = max(peak, rbase[vk] + dynpeak[vk], run)
            if best < 0 or a < s1 or (a == s1 and (f2 < s2 or (f2 == s2 and (
                    run < s3 or (run == s3 and v < ready[best]))))):
                best, bk, s1, s2, s3 = i, vk, a, f2, run
        v = ready[best]
        k = bk
        cnt -= 1
        for i in range(best, cnt):  # keep the order in which they became ready
            ready[i] = ready[i + 1]
        taken = 0
        if has_reuse:
            taken = _greedy_taken(v, k, reuse_ptr, reuse_idx, placement, left, resident, nbytes)
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
        level[k] += nbytes[v] + temp[v] - taken
        if level[k] > dynpeak[k]:
            dynpeak[k] = level[k]
        level[k] += taken - temp[v]
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
        for e in range(in_ptr[v], in_ptr[v + 1]):  # v's inputs changed: their readers' terms did
            u = in_idx[e]
            for f in range(out_ptr[u], out_ptr[u + 1]):
                dirty[out_idx[f]] = True
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


@numba.njit(**_JIT)
def xla_dfs_weights(post, n, resident, nbytes, users, in_ptr, in_idx, extra, total):
    """XLA DFSMemoryScheduler's two weights (`regal.heuristics.xla_dfs_order`), in post-order:
    extra[v] = min(max(users[v] - 1, 0) + sum of extra over v's distinct data inputs, n) and
    total[v] = min(nbytes[v] + sum of total over them, bytes of the non-resident nodes so far);
    resident nodes keep 0. Writes extra, total: int64[n] (zeros on entry). O(n + e)."""
    mark = np.full(n, -1, dtype=np.int64)   # mark[u] == v: u already counted for v
    cumulative = np.int64(0)
    for i in range(post.shape[0]):
        v = post[i]
        if resident[v]:
            continue
        b = nbytes[v]
        cumulative += b
        se = np.int64(0)
        st = np.int64(0)
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if mark[u] != v:
                mark[u] = v
                se = min(se + extra[u], n)             # saturated: the result is capped anyway
                st = min(st + total[u], cumulative)
        extra[v] = min(max(users[v] - 1, 0) + se, n)
        total[v] = min(b + st, cumulative)
