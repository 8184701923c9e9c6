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
- `recompute_splits`: where each node's recomputation goes in an order (the decoder's rule,
  SPEC.md section 5b): before the consumer that follows the widest gap between consecutive
  consumers; -1 when the node may not be recomputed or has no such gap.
- `choose_by_keys`: which candidates a chromosome recomputes within the extra-cost budget (its
  recompute keys >= 0.5, highest first).
- `build_sequence`: the sequence of an order with the chosen recomputations inserted.
- `recompute_decode_simulate` / `recompute_evaluate_population`: a chromosome of n (d + 2) keys
  decoded and scored; the population in parallel.
- `recompute_climb`: the steepest-descent climb over the recompute set for a fixed placement
  and order (add a recomputation of a tensor held across the peak, drop one that does not pay).

The naive twin is tests/naive.py's `expand_instances` + `simulate`.
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT, PARALLEL_JIT, UINDEX as _U
from regal._kernels import placement_from_keys, priority_order

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
def recompute_splits(g, order, pinned, split, gap_from):
    """For each node v of the order (int32[n], a permutation): split[v], the position in `order`
    of the consumer before which v's recomputation runs, and gap_from[v], the position of the
    last consumer that still reads v's first instance; split[v] = -1 where v may not be
    recomputed: pinned (bool[n]: the graph's `recompute: false`), resident, a graph output, fewer
    than two consumers, or no two consecutive consumers more than one step apart (SPEC.md
    section 5b: the widest gap, the earliest of equal ones)."""
    n = g.num_nodes
    pos = np.empty(n, dtype=np.int64)
    for t in range(n):
        pos[_U(order[t])] = t
    buf = np.empty(n, dtype=np.int64)
    for v in range(n):
        split[v] = -1
        gap_from[v] = -1
        c = g.out_ptr[v + 1] - g.out_ptr[v]
        if g.resident[v] or g.output[v] or pinned[v] or c < 2:
            continue
        k = 0
        for e in range(_U(g.out_ptr[v]), _U(g.out_ptr[v + 1])):
            p = pos[_U(g.out_idx[e])]
            j = k
            while j > 0 and buf[j - 1] > p:  # insertion sort: a node has few consumers
                buf[j] = buf[j - 1]
                j -= 1
            buf[j] = p
            k += 1
        best = 1
        at = -1
        for j in range(1, k):
            gap = buf[j] - buf[j - 1]
            if gap > best:
                best = gap
                at = j
        if at > 0:
            split[v] = buf[at]
            gap_from[v] = buf[at - 1]


@numba.njit(**_JIT)
def choose_by_keys(rkeys, split, cost, budget, chosen):
    """chosen[v] = True for the nodes the recompute keys rkeys (float64[n]) ask for (>= WANT, split
    found), highest key first (ties to the lower index), each while its cost fits what is left of
    `budget`; returns the extra cost."""
    n = split.shape[0]
    cnt = 0
    for v in range(n):
        chosen[v] = False
        cnt += split[v] >= 0 and rkeys[v] >= WANT
    if cnt == 0 or budget <= 0.0:
        return 0.0
    key = np.empty(cnt, dtype=np.float64)
    node = np.empty(cnt, dtype=np.int64)
    j = 0
    for v in range(n):
        if split[v] >= 0 and rkeys[v] >= WANT:
            key[j] = -rkeys[v]
            node[j] = v
            j += 1
    idx = np.argsort(key, kind="mergesort")
    spent = 0.0
    for j in range(cnt):
        v = node[idx[j]]
        c = cost[v]
        if spent + c <= budget:
            spent += c
            chosen[v] = True
    return spent


@numba.njit(**_JIT)
def build_sequence(g, order, split, gap_from, chosen, seq, spos):
    """Write the sequence of `order` with the chosen recomputations inserted (SPEC.md section 5b)
    and return its length m (seq: int32[>= n + chosen]). A chosen node v runs again right before
    the consumer at split[v], or earlier: before the recomputation of a chosen consumer that is
    inserted inside v's gap (after gap_from[v]), so that it reads the new instance, not the first
    (nodes taken in reverse order, consumers before their inputs). Several before one position
    run in their order's order, an input's recomputation before its reader's. spos (int64[>= m],
    or empty): each step's position in `order` (an inserted one: that of the node it precedes)."""
    n = order.shape[0]
    with_pos = spos.shape[0] > 0
    pos = np.empty(n, dtype=np.int64)
    for t in range(n):
        pos[order[t]] = t
    at = np.full(n, -1, dtype=np.int64)   # each chosen node's insertion position
    for t in range(n - 1, -1, -1):
        v = order[t]
        if not chosen[v] or split[v] < 0:
            continue
        s = split[v]
        for e in range(g.out_ptr[v], g.out_ptr[v + 1]):
            w = g.out_idx[e]
            a = at[w]
            if a > gap_from[v] and a < s:
                s = a
        at[v] = s
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
            s = at[v]
            ins[fill[s]] = v
            fill[s] += 1
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
def recompute_decode_simulate(g, pinned, keys, d, budget, cost, placement, order, chosen, device_peak):
    """Decode one chromosome of n (d + 2) keys (section 5b: node v's d affinities, its priority,
    its recompute key) and return its peak; writes placement, order (int32[n]) and chosen
    (bool[n]); the extra cost is `recompute_extra(cost, chosen)`."""
    n = g.num_nodes
    w = d + 2
    placement_keys = np.empty(n * (d + 1), dtype=np.float64)
    prio = np.empty(n, dtype=np.float64)
    rkeys = np.empty(n, dtype=np.float64)
    for v in range(n):
        for j in range(d + 1):
            placement_keys[v * (d + 1) + j] = keys[v * w + j]
        prio[v] = keys[v * w + d]
        rkeys[v] = keys[v * w + d + 1]
    placement_from_keys(placement_keys, n, d, placement)
    priority_order(prio, n, g.pred_cnt, g.succ_ptr, g.succ_idx, g.resident, order)
    split = np.empty(n, dtype=np.int64)
    gap_from = np.empty(n, dtype=np.int64)
    recompute_splits(g, order, pinned, split, gap_from)
    choose_by_keys(rkeys, split, cost, budget, chosen)
    seq = np.empty(2 * n, dtype=np.int32)
    m = build_sequence(g, order, split, gap_from, chosen, seq, np.empty(0, dtype=np.int64))
    return instance_peak(g, seq[:m], placement, d, device_peak, np.empty((0, d), dtype=np.int64))


@numba.njit(**PARALLEL_JIT)
def recompute_evaluate_population(g, pinned, population, d, budget, cost, fitness):
    """fitness[i] = the peak of chromosome population[i] (n (d + 2) keys), in parallel."""
    m = population.shape[0]
    n = g.num_nodes
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        order = np.empty(n, dtype=np.int32)
        chosen = np.empty(n, dtype=np.bool_)
        device_peak = np.empty(d, dtype=np.int64)
        fitness[i] = recompute_decode_simulate(g, pinned, population[i], d, budget, cost, placement, order,
                                               chosen, device_peak)


@numba.njit(**_JIT)
def _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace):
    """(peak, steps at the peak, m) of the order with the chosen recomputations; fills seq, spos
    and trace."""
    m = build_sequence(g, order, split, gap_from, chosen, seq, spos)
    peak = instance_peak(g, seq[:m], placement, d, device_peak, trace[:m])
    hits = 0
    for t in range(m):
        for q in range(d):
            hits += trace[t, q] == peak
    return peak, hits, m


@numba.njit(**_JIT)
def recompute_climb(g, pinned, order, placement, d, cost, budget, chosen, max_evals, limit):
    """Steepest descent over the recompute set of a fixed placement and order (int32[n] each).

    chosen (bool[n]) is the start and is updated in place. Each round scores every candidate that
    could lower the peak: a node not chosen whose cost fits what is left of `budget`, whose first
    instance is held across a step at the peak on its home device without a reader there (its
    widest consumer gap spans that step); it takes the best by (peak, steps at the peak), and when
    none is better, drops the chosen node whose removal keeps the score (freeing budget), else
    stops. limit >= 0: the objective is feasibility first (peak <= limit), then the least extra
    cost: once the peak fits, it drops the costliest recomputation that keeps it fitting, until
    none does. Returns (peak, extra cost, evaluations spent): at most max_evals (a schedule scored
    again for its trace is not counted twice)."""
    n = g.num_nodes
    split = np.empty(n, dtype=np.int64)
    gap_from = np.empty(n, dtype=np.int64)
    recompute_splits(g, order, pinned, split, gap_from)
    for v in range(n):
        if split[v] < 0:
            chosen[v] = False
    spent = 0.0
    for v in range(n):
        if chosen[v]:
            spent += cost[v]
    seq = np.empty(2 * n, dtype=np.int32)
    spos = np.empty(2 * n, dtype=np.int64)   # each step's position in the order (section 5b)
    trace = np.empty((2 * n, d), dtype=np.int64)
    device_peak = np.empty(d, dtype=np.int64)
    peak, hits, m = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
    evals = 1
    dev_at = np.zeros(n * d, dtype=np.bool_)
    while evals < max_evals:
        fits = limit >= 0 and peak <= limit
        if fits:
            # least extra cost at a fitting peak: drop the costliest recomputation that keeps it fitting
            best_v = -1
            for v in range(n):
                if chosen[v] and evals < max_evals and (best_v < 0 or cost[v] > cost[best_v]):
                    chosen[v] = False
                    p2, h2, m2 = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
                    evals += 1
                    chosen[v] = True
                    if p2 <= limit:
                        best_v = v
            if best_v < 0:
                break
            chosen[best_v] = False
            spent -= cost[best_v]
            # the schedule scored above, again for its trace: not a new evaluation
            peak, hits, m = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
            continue
        # the (order position, device) pairs at the peak
        dev_at[:] = False
        for t in range(m):
            for q in range(d):
                if trace[t, q] == peak:
                    dev_at[spos[t] * d + q] = True
        best_v = -1
        best_peak = peak
        best_hits = hits
        best_cost = 0.0
        for v in range(n):
            if chosen[v] or split[v] < 0 or spent + cost[v] > budget or evals >= max_evals:
                continue
            h = placement[v]
            spans = False
            for s in range(gap_from[v] + 1, split[v]):
                if dev_at[s * d + h]:
                    spans = True
                    break
            if not spans:
                continue
            chosen[v] = True
            p2, h2, m2 = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
            evals += 1
            chosen[v] = False
            if p2 < best_peak or (p2 == best_peak and (h2 < best_hits or (h2 == best_hits and best_v >= 0
                                                                           and cost[v] < best_cost))):
                best_v = v
                best_peak = p2
                best_hits = h2
                best_cost = cost[v]
        if best_v >= 0 and (best_peak < peak or best_hits < hits):
            chosen[best_v] = True
            spent += cost[best_v]
            peak, hits, m = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
            continue
        # no add pays: drop a recomputation that does not pay for itself (frees budget), else stop
        dropped = False
        for v in range(n):
            if chosen[v] and evals < max_evals:
                chosen[v] = False
                p2, h2, m2 = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
                evals += 1
                if p2 < peak or (p2 == peak and h2 <= hits):
                    spent -= cost[v]
                    peak, hits = p2, h2
                    dropped = True
                    break
                chosen[v] = True
        if not dropped:
            break
    peak, hits, m = _score(g, order, placement, d, split, gap_from, chosen, seq, spos, device_peak, trace)
    return peak, spent, evals
