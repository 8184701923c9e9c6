"""The recompute climb (SPEC.md section 3b): steepest descent over which nodes run again, for a
fixed placement and order, scored by `regal._remat`'s instance simulator.

Each round marks the tensors held across a step at the peak (`_live_at_peak`) and scores, for the
largest of them, the recomputation of the tensor alone and with the inputs it is made from one
and two levels up (`_compound`: a chain made again from what is still alive); it keeps the best
by (peak, steps at the peak, cost) within the budget, else drops a recomputation that no longer
pays (`_drop_one`), else stops. Under a memory limit it is feasibility first, then the least
extra cost (`_cheapen`). Used by `regal.recompute_search`.
"""

import numpy as np
import numba

from regal._jit import JIT as _JIT
from regal._remat import _readers, build_sequence, eligible, instance_peak

@numba.njit(**_JIT)
def _score(g, order, placement, d, rg, chosen, cost, w):
    """(peak, steps at the peak, m, extra cost) of `order` with the chosen recomputations; fills
    the work arrays w (`_work`)."""
    at, seq, spos, device_peak, trace = w
    m = build_sequence(g, order, rg, chosen, at, seq, spos)
    peak = instance_peak(g, seq[:m], placement, d, device_peak, trace[:m])
    hits = 0
    for t in range(m):
        for q in range(d):
            hits += trace[t, q] == peak
    extra = 0.0
    for v in range(order.shape[0]):
        if at[v] >= 0:
            extra += cost[v]
    return peak, hits, m, extra


#: The peak steps whose live tensors the climb tries to recompute, per round.
PEAK_STEPS = 3
#: The most candidates (the largest live tensors first) a round of the climb scores, by default.
CANDIDATES = 48
#: The most nodes one compound move recomputes together.
COMPOUND_MAX = 64


@numba.njit(**_JIT)
def _live_at_peak(g, seq, m, placement, d, rg, chosen, trace, peak, cand):
    """Mark cand[v] for the nodes not chosen that may be recomputed and whose instance is held
    across one of the first PEAK_STEPS steps at the peak on that step's device: its home copy (made
    before, read after) or a copy there (read there before and after); returns how many."""
    rptr, ridx = _readers(g, seq[:m])
    n = g.num_nodes
    for v in range(n):
        cand[v] = False
    found = 0
    steps = 0
    for t in range(m):
        for q in range(d):
            if trace[t, q] != peak or steps >= PEAK_STEPS:
                continue
            steps += 1
            for i in range(t):
                u = seq[i]
                if cand[u] or chosen[u] or not eligible(g, rg, u) or rptr[i + 1] == rptr[i]:
                    continue
                if placement[u] == q:   # the home copy: made before t, read after it
                    live = ridx[rptr[i + 1] - 1] > t
                else:                   # a copy on q: read there before (or at) t and after it
                    before = False
                    after = False
                    for e in range(rptr[i], rptr[i + 1]):
                        r = ridx[e]
                        if placement[seq[r]] == q:
                            before |= r <= t
                            after |= r > t
                    live = before and after
                if live:
                    cand[u] = True
                    found += 1
    return found


@numba.njit(**_JIT)
def _compound(g, rg, chosen, v, depth, members):
    """The nodes a compound move recomputes: v and, `depth` levels up, the inputs that may be
    recomputed and are not chosen yet (so a chain is recomputed from what is still alive);
    returns how many (members: int64[*])."""
    k = 1
    members[0] = v
    lo = 0
    for _ in range(depth):
        hi = k
        for j in range(lo, hi):
            x = members[j]
            for e in range(g.in_ptr[x], g.in_ptr[x + 1]):
                u = g.in_idx[e]
                if chosen[u] or not eligible(g, rg, u) or k >= members.shape[0]:
                    continue
                dup = False
                for i in range(k):
                    dup |= members[i] == u
                if not dup:
                    members[k] = u
                    k += 1
        lo = hi
    return k


@numba.njit(**_JIT)
def _better(p, h, c, bp, bh, bc):
    """Whether (peak, steps at peak, cost) p, h, c beats bp, bh, bc lexicographically."""
    return p < bp or (p == bp and (h < bh or (h == bh and c < bc)))


@numba.njit(**_JIT)
def _work(n, d):
    """The climb's work arrays: (at int64[n], seq int32[2n], spos int64[2n], device_peak int64[d],
    trace int64[2n, d])."""
    return (np.empty(n, dtype=np.int64), np.empty(2 * n, dtype=np.int32), np.empty(2 * n, dtype=np.int64),
            np.empty(d, dtype=np.int64), np.empty((2 * n, d), dtype=np.int64))


@numba.njit(**_JIT)
def _cheapen(g, rg, order, placement, d, cost, chosen, limit, max_evals, evals, w):
    """Under a memory limit the peak fits: the costliest recomputation whose removal keeps it
    fitting (-1: none), and the evaluations."""
    drop = -1
    for v in range(order.shape[0]):
        if chosen[v] and evals < max_evals and (drop < 0 or cost[v] > cost[drop]):
            chosen[v] = False
            p2, h2, m2, x2 = _score(g, order, placement, d, rg, chosen, cost, w)
            evals += 1
            chosen[v] = True
            if p2 <= limit:
                drop = v
    return drop, evals


@numba.njit(**_JIT)
def _drop_one(g, rg, order, placement, d, cost, chosen, peak, hits, max_evals, evals, w):
    """Drop the first recomputation whose removal keeps (peak, steps at the peak) as good: it frees
    budget for one that pays. Returns (dropped, evaluations)."""
    for v in range(order.shape[0]):
        if chosen[v] and evals < max_evals:
            chosen[v] = False
            p2, h2, m2, x2 = _score(g, order, placement, d, rg, chosen, cost, w)
            evals += 1
            if p2 < peak or (p2 == peak and h2 <= hits):
                return True, evals
            chosen[v] = True
    return False, evals


@numba.njit(**_JIT)
def _better_per_cost(peak, p, h, c, bp, bh, bc):
    """Under a memory limit: whether a move to (p, h, c) beats the best so far (bp, bh, bc) from a
    schedule at `peak`: the larger fall of the peak per unit of cost, where either falls; else
    `_better`."""
    gain = peak - p
    best_gain = peak - bp
    if gain > 0 and best_gain > 0:
        return gain * (bc + 1e-30) > best_gain * (c + 1e-30)
    if gain > 0 or best_gain > 0:
        return gain > 0
    return _better(p, h, c, bp, bh, bc)


@numba.njit(**_JIT)
def _best_add(g, rg, sched, cost, chosen, cand, cur, lim, members, w):
    """Score the compound moves of the `candidates` largest marked tensors (each alone, then with
    its inputs one and two levels up) within the budget; the best that beats (peak, hits) is left
    in members[1] (ratio: the largest fall of the peak per unit of cost first, what a memory
    limit asks for). sched: (order, placement, d); cur: the schedule's (peak, hits, extra cost,
    evaluations); lim: (budget, max_evals, ratio, candidates); members: int64[2, COMPOUND_MAX], the move
    scored and the best. Returns (the best's size, 0 when none beats the schedule; evaluations)."""
    order, placement, d = sched
    peak, hits, extra, evals = cur
    budget, max_evals, ratio, candidates = lim
    n = g.num_nodes
    num = 0
    for v in range(n):
        num += cand[v]
    idx = np.empty(num, dtype=np.int64)
    key = np.empty(num, dtype=np.int64)
    j = 0
    for v in range(n):
        if cand[v]:
            idx[j] = v
            key[j] = -g.nbytes[v]
            j += 1
    idx = idx[np.argsort(key, kind="mergesort")]   # the largest live tensors first
    bp, bh, bc = peak, hits, 0.0
    bk = 0
    for j in range(min(num, candidates)):
        last = 0
        for depth in range(3):
            k = _compound(g, rg, chosen, idx[j], depth, members[0])
            if k == last:   # no new input at this depth
                break
            last = k
            c = 0.0
            for i in range(k):
                c += cost[members[0, i]]
            if extra + c > budget or evals >= max_evals:
                break
            for i in range(k):
                chosen[members[0, i]] = True
            p2, h2, m2, x2 = _score(g, order, placement, d, rg, chosen, cost, w)
            evals += 1
            for i in range(k):
                chosen[members[0, i]] = False
            if x2 <= budget and (_better_per_cost(peak, p2, h2, c, bp, bh, bc) if ratio else
                                 _better(p2, h2, c, bp, bh, bc)):
                bp, bh, bc = p2, h2, c
                bk = k
                for i in range(k):
                    members[1, i] = members[0, i]
    return bk, evals


@numba.njit(**_JIT)
def recompute_climb(g, rg, order, placement, d, cost, budget, chosen, limit, steps):
    """Steepest descent over the recompute set of a fixed placement and order (int32[n] each).

    chosen (bool[n]) is the start, updated in place (left holding exactly the nodes that run
    again). Each round marks the nodes held across a step at the peak on their device
    (`_live_at_peak`), and scores for the largest `candidates` of them the recomputation of the node
    alone and of the node with its inputs one and two levels up (`_compound`): a chain made
    again from what is still alive. It takes the best by (peak, steps at the peak, cost) when it
    beats the current schedule within the budget; when none does, it drops a recomputation
    whose removal keeps the score (freeing budget), else it stops. limit >= 0: feasibility first
    (peak <= limit), then the least extra cost: once the peak fits it drops the costliest
    recomputation that keeps it fitting, until none does. steps: (max_evals, rounds,
    candidates): the most evaluations; rounds > 0: return after that many
    rounds (a caller polls its deadline between calls; the climb goes on from `chosen` as if
    never stopped). Returns (peak, extra cost, evaluations, whether it stopped on `rounds`):
    evaluations at most max_evals (a schedule scored again for its trace is not counted)."""
    max_evals, rounds, candidates = steps
    n = g.num_nodes
    for v in range(n):
        chosen[v] = chosen[v] and eligible(g, rg, v)
    w = _work(n, d)
    cand = np.zeros(n, dtype=np.bool_)
    members = np.empty((2, COMPOUND_MAX), dtype=np.int64)   # the move scored, the best
    peak, hits, m, extra = _score(g, order, placement, d, rg, chosen, cost, w)
    evals = 1
    done = 0
    cut = False
    while evals < max_evals:
        if rounds > 0 and done >= rounds:
            cut = True
            break
        done += 1
        if limit >= 0 and peak <= limit:
            drop, evals = _cheapen(g, rg, order, placement, d, cost, chosen, limit, max_evals, evals, w)
            if drop < 0:
                break
            chosen[drop] = False
            peak, hits, m, extra = _score(g, order, placement, d, rg, chosen, cost, w)
            continue
        _live_at_peak(g, w[1], m, placement, d, rg, chosen, w[4], peak, cand)
        bk, evals = _best_add(g, rg, (order, placement, d), cost, chosen, cand, (peak, hits, extra, evals),
                              (budget, max_evals, limit >= 0, candidates), members, w)
        if bk > 0:
            for i in range(bk):
                chosen[members[1, i]] = True
            peak, hits, m, extra = _score(g, order, placement, d, rg, chosen, cost, w)
            continue
        # no add pays: drop a recomputation that does not pay for itself (frees budget), else stop
        dropped, evals = _drop_one(g, rg, order, placement, d, cost, chosen, peak, hits, max_evals, evals, w)
        if not dropped:
            break
        peak, hits, m, extra = _score(g, order, placement, d, rg, chosen, cost, w)
    peak, hits, m, extra = _score(g, order, placement, d, rg, chosen, cost, w)
    if not cut:   # a cut climb goes on from `chosen` as it was
        for v in range(n):
            chosen[v] = w[0][v] >= 0
    return peak, extra, evals, cut
