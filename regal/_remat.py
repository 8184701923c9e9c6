"""Recomputation's kernels (SPEC.md section 3b): a schedule whose global sequence may run a node
again, scored on its instance graph, and the recompute part of the chromosome.

A *sequence* `seq` (int32[m], m >= n) lists every node at least once; each entry is an
*instance*. Instance t of node v reads, for each data input u, the latest instance of u before
t; its bytes are freed under section 3's rules applied to the instances (a copy on device q
after the last reader there, the home copy after the last reader at home and every copy's
arrival), so a recomputation ends the life of the first instance early and starts a second one
just before the readers it serves.

- `instance_peak`: section 3 on the instance graph (d >= 1), with an optional trace; the same
  sweep as `regal._peak_memory._sweep`, over instances instead of nodes.
- `insertion_points`: where each chosen node runs again in an order (SPEC.md section 5b): after
  the widest gap between its readers (its consumers and its chosen consumers' recomputations).
- `choose_by_keys`: which nodes a chromosome recomputes within the extra-cost budget (its
  recompute keys >= 0.5, highest first).
- `build_sequence`: the sequence of an order with the chosen recomputations inserted.
- `recompute_decode_simulate` / `recompute_evaluate_population`: a chromosome of n (d + 2) keys
  decoded and scored; the population in parallel.
The climb over the recompute set is `regal._remat_climb`.

The naive twin is tests/naive.py's `expand_instances` + `simulate`.
"""

import numba
import numpy as np

from typing import NamedTuple

from regal._jit import JIT as _JIT, PARALLEL_JIT, UINDEX as _U
from regal.kernels.decode import placement_from_keys, priority_order


class RematGraph(NamedTuple):
    """What recomputation reads beside the `KernelGraph` (n nodes): `regal.recompute.remat_graph`."""
    pinned: np.ndarray     # bool[n]     may not run more than once (`recompute: false`)
    ctrl_ptr: np.ndarray   # int64[n+1]  control successors (v is a control input of them), CSR
    ctrl_idx: np.ndarray   # int32[*]

#: A recompute key at or above this asks for the node's recomputation (SPEC.md section 5b).
WANT = 0.5


@numba.njit(**_JIT)
def _readers(g, seq):
    """The reader CSR of the instances: (rptr int64[m+1], ridx int32[*]): the positions that read
    instance t are ridx[rptr[t]:rptr[t+1]], ascending."""
    m = seq.shape[0]
    n = g.num_nodes
    cur = np.full(n, -1, dtype=np.int64)
    rptr = np.zeros(m + 1, dtype=np.int64)
    for t in range(m):
        v = _U(seq[t])
        for e in range(_U(g.in_ptr[v]), _U(g.in_ptr[v + 1])):
            rptr[_U(cur[_U(g.in_idx[e])] + 1)] += 1
        cur[v] = t
    for t in range(m):
        rptr[t + 1] += rptr[t]
    ridx = np.empty(rptr[m], dtype=np.int32)
    fill = rptr[:m].copy()
    cur[:] = -1
    for t in range(m):
        v = _U(seq[t])
        for e in range(_U(g.in_ptr[v]), _U(g.in_ptr[v + 1])):
            i = _U(cur[_U(g.in_idx[e])])
            ridx[_U(fill[i])] = t
            fill[i] += 1
        cur[v] = t
    return rptr, ridx


@numba.njit(**_JIT)
def instance_peak(g, seq, placement, d, device_peak, trace):
    """Peak memory of the sequence `seq` (int32[m]) with `placement` (int32[n]) on d devices:
    SPEC.md section 3 on the instance graph (section 3b). Writes device_peak int64[d], returns its
    max; trace int64[m, d] (or [0, d]): row t, every device's bytes while step t runs."""
    m = seq.shape[0]
    rptr, ridx = _readers(g, seq)
    add = np.zeros(m, dtype=np.int64)
    free = np.zeros((m + 1) * d, dtype=np.int64)
    res = np.zeros(d, dtype=np.int64)
    with_reuse = g.reuse_idx.shape[0] > 0
    home_free = np.full(m if with_reuse else 0, -1, dtype=np.int64)
    first = np.full(d, m, dtype=np.int64)
    last = np.full(d, -1, dtype=np.int64)
    hosts = np.empty(d, dtype=np.int64)
    for i in range(m):
        u = _U(seq[i])
        h = _U(placement[u])
        b = g.nbytes[u]
        if g.resident[u]:
            res[h] += b
        else:
            add[i] += b
        k = 0
        for e in range(_U(rptr[i]), _U(rptr[i + 1])):
            tw = ridx[e]
            q = _U(placement[_U(seq[_U(tw)])])
            hosts[k] = q
            k += first[q] == m
            first[q] = min(first[q], tw)
            last[q] = max(last[q], tw)
        hf = -1
        for j in range(k):
            q = _U(hosts[j])
            remote = q != h
            add[_U(first[q])] += b * remote
            free[_U((last[q] + 1) * d) + q] += b * remote
            hf = max(hf, first[q] if remote else last[q])
            first[q] = m
            last[q] = -1
        kept = g.resident[u] or g.output[u]
        free[_U((hf + 1) * d) + h] += b * (not kept)
        if with_reuse and not kept:
            home_free[i] = hf
    taken = _instance_taken(g, seq, placement, home_free)
    mem = res.copy()
    for k in range(d):
        device_peak[k] = res[k]
    tracing = trace.shape[0] > 0
    for t in range(m):
        v = _U(seq[t])
        running = not g.resident[v]
        k = _U(placement[v])
        row = _U((t + 1) * d)
        if tracing:
            for q in range(d):
                if not (running and q == k):
                    mem[q] -= free[row + _U(q)]
                trace[t, q] = mem[q]
        if running:
            cur = mem[k] + add[t]
            x = cur + g.temp[v]
            if with_reuse:
                x -= taken[t]
            device_peak[k] = max(device_peak[k], x)
            if tracing:
                trace[t, k] = x
                mem[k] = cur - free[row + k]
            else:
                mem[k] = cur
        if not tracing:
            for q in range(d):
                mem[q] -= free[row + _U(q)]
    return device_peak.max()


@numba.njit(inline="always", **_JIT)
def _instance_taken(g, seq, placement, home_free):
    """int64[m] (empty without `reuse`): the bytes each instance takes over (SPEC.md section 3
    step 2 on the instance graph): an input instance on its device, not resident, whose home
    copy this step frees, while it fits, in the node's `reuse` order."""
    m = seq.shape[0]
    if g.reuse_idx.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    taken = np.zeros(m, dtype=np.int64)
    cur = np.full(g.num_nodes, -1, dtype=np.int64)
    for t in range(m):
        v = _U(seq[t])
        if not g.resident[v]:
            tv = 0
            for e in range(_U(g.reuse_ptr[v]), _U(g.reuse_ptr[v + 1])):
                u = _U(g.reuse_idx[e])
                i = cur[u]
                nb = g.nbytes[u]
                if (i >= 0 and placement[u] == placement[v] and home_free[_U(i)] == t and not g.resident[u]
                        and tv + nb <= g.nbytes[v]):
                    tv += nb
            taken[t] = tv
        cur[v] = t
    return taken


@numba.njit(**_JIT)
def eligible(g, rg, v):
    """Whether node v may run more than once (SPEC.md 3b): not resident, not a graph output (marked,
    or without consumers), not pinned (the graph's `recompute: false`)."""
    return not (g.resident[v] or g.output[v] or rg.pinned[v] or g.out_ptr[v + 1] == g.out_ptr[v])


@numba.njit(**_JIT)
def insertion_points(g, order, rg, chosen, at):
    """SPEC.md section 5b: at[v] = the position in `order` (int32[n], a permutation) before which
    chosen node v runs again, -1 where it does not. Nodes are taken in reverse order: v's reader
    positions are its consumers' positions and the insertion points of its chosen consumers'
    recomputations; the widest gap between two consecutive ones (wider than one step, the
    earliest of equal widths) ends at v's insertion point: the readers from there on read the new
    instance. A control edge orders every instance of v before its successor: a control successor
    inside the gap moves the insertion point back to it (the same readers read the new instance);
    one before the gap (at or before the last reader of the first instance) means v does not run
    again."""
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    for t in range(n):
        pos[order[t]] = t
    buf = np.empty(2 * n + 2, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        v = order[t]
        at[v] = -1
        if not chosen[v] or not eligible(g, rg, v):
            continue
        k = 0
        for e in range(g.out_ptr[v], g.out_ptr[v + 1]):
            w = g.out_idx[e]
            for r in range(2):
                p = pos[w] if r == 0 else at[w]
                if p < 0:
                    continue
                j = k
                while j > 0 and buf[j - 1] > p:  # insertion sort: a node has few readers
                    buf[j] = buf[j - 1]
                    j -= 1
                buf[j] = p
                k += 1
        best = 1
        lo = -1
        for j in range(1, k):
            gap = buf[j] - buf[j - 1]
            if gap > best:
                best = gap
                at[v] = buf[j]
                lo = buf[j - 1]
        for e in range(rg.ctrl_ptr[v], rg.ctrl_ptr[v + 1]):  # every instance before a control successor
            c = pos[rg.ctrl_idx[e]]
            if at[v] > c:
                at[v] = c if c > lo else -1  # inside the gap: the recomputation moves back before it
            if at[v] < 0:
                break


@numba.njit(**_JIT)
def build_sequence(g, order, rg, chosen, at, seq, spos):
    """Write the sequence of `order` with the chosen nodes' recomputations inserted at their
    insertion points (`insertion_points`, written to at: int64[n]), several before one position in
    `order`'s order (an input's before its reader's); returns its length m (seq: int32[>= 2n]).
    spos (int64[>= m], or empty): each step's position in `order` (an inserted one: that of the
    node it precedes)."""
    n = order.shape[0]
    insertion_points(g, order, rg, chosen, at)
    with_pos = spos.shape[0] > 0
    cnt = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        if at[v] >= 0:
            cnt[at[v] + 1] += 1
    for t in range(n):
        cnt[t + 1] += cnt[t]
    ins = np.empty(cnt[n], dtype=np.int32)
    fill = cnt[:n].copy()
    for t in range(n):
        v = order[t]
        if at[v] >= 0:
            ins[fill[at[v]]] = v
            fill[at[v]] += 1
    m = 0
    for t in range(n):
        for j in range(cnt[t], cnt[t + 1]):
            seq[m] = ins[j]
            if with_pos:
                spos[m] = t
            m += 1
        seq[m] = order[t]
        if with_pos:
            spos[m] = t
        m += 1
    return m


@numba.njit(**_JIT)
def choose_by_keys(g, rg, rkeys, cost, budget, chosen):
    """chosen[v] = True for the nodes the recompute keys rkeys (float64[n]) ask for (>= WANT and
    eligible), highest key first (ties to the lower index), each while its cost fits what is left
    of `budget` (SPEC.md 5b); returns the cost of the chosen."""
    n = rkeys.shape[0]
    cnt = 0
    for v in range(n):
        chosen[v] = False
        cnt += rkeys[v] >= WANT and eligible(g, rg, v)
    if cnt == 0 or budget <= 0.0:
        return 0.0
    key = np.empty(cnt, dtype=np.float64)
    node = np.empty(cnt, dtype=np.int64)
    j = 0
    for v in range(n):
        if rkeys[v] >= WANT and eligible(g, rg, v):
            key[j] = -rkeys[v]
            node[j] = v
            j += 1
    idx = np.argsort(key, kind="mergesort")
    spent = 0.0
    for j in range(cnt):
        v = node[idx[j]]
        if spent + cost[v] <= budget:
            spent += cost[v]
            chosen[v] = True
    return spent


@numba.njit(**_JIT)
def recompute_decode_simulate(g, rg, keys, d, budget, cost, placement, order, chosen, device_peak):
    """Decode one chromosome of n (d + 2) keys (SPEC.md 5b: node v's d affinities, its priority,
    its recompute key) and return its peak; writes placement, order (int32[n]) and chosen
    (bool[n]: the nodes that run again)."""
    n = g.num_nodes
    w = d + 2
    affinity = np.empty(n * (d + 1), dtype=np.float64)
    prio = np.empty(n, dtype=np.float64)
    rkeys = np.empty(n, dtype=np.float64)
    for v in range(n):
        for j in range(d + 1):
            affinity[v * (d + 1) + j] = keys[v * w + j]
        prio[v] = keys[v * w + d]
        rkeys[v] = keys[v * w + d + 1]
    placement_from_keys(affinity, n, d, placement)
    priority_order(prio, n, g.pred_cnt, g.succ_ptr, g.succ_idx, g.resident, order)
    choose_by_keys(g, rg, rkeys, cost, budget, chosen)
    seq = np.empty(2 * n, dtype=np.int32)
    at = np.empty(n, dtype=np.int64)
    m = build_sequence(g, order, rg, chosen, at, seq, np.empty(0, dtype=np.int64))
    for v in range(n):
        chosen[v] = at[v] >= 0
    return instance_peak(g, seq[:m], placement, d, device_peak, np.empty((0, d), dtype=np.int64))


@numba.njit(**PARALLEL_JIT)
def recompute_evaluate_population(g, rg, population, d, budget, cost, fitness):
    """fitness[i] = the peak of chromosome population[i] (n (d + 2) keys), in parallel."""
    m = population.shape[0]
    n = g.num_nodes
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        chosen = np.empty(n, dtype=np.bool_)
        device_peak = np.empty(d, dtype=np.int64)
        fitness[i] = recompute_decode_simulate(g, rg, population[i], d, budget, cost, placement, order,
                                               chosen, device_peak)
