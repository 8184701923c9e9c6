"""The heuristic orders' kernels (`regal.heuristics` calls them): DFS post-order, XLA's list
scheduler and its DFS weights, Inductor's LPMF order; the graph as one struct, `g` (a
`regal.kernels.structs.KernelGraph`), arrays out, naive twins in `tests/naive.py`. The greedy
placement-and-order is in `regal.kernels.greedy`."""

from __future__ import annotations

import numba
import numpy as np

from regal._jit import JIT as _JIT


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
# The compiler heuristics of `regal.heuristics` (its wrappers check that every node was ordered).

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
    """Push ready node v with its current priority (negated: the heap is a min-heap). A step's
    helper takes the arrays it reads, not the graph struct: a call passes them all."""
    if 0 < nbytes[v] <= scalar_bytes:
        p = _BIG
        nu = _BIG
    else:
        p = freed[v] - (0 if resident[v] else nbytes[v])
        nu = out_ptr[v + 1] - out_ptr[v]
    return _heap3_push(hk, hv, size, -p, -nu, -stamp[v], v)


@numba.njit(**_JIT)
def xla_list_order(g, scalar_bytes, order):
    """XLA's ListScheduler: repeatedly run the ready node of highest priority.

    Priority = (bytes freed - bytes defined, number of users); effective scalars first. A
    buffer is freed by the node that is its last unscheduled use; parameters and constants
    (resident) are ignored on both sides. XLA keeps ready nodes in a multimap keyed by priority
    and takes the last entry, so among equal priorities the most recently (re)inserted wins;
    `stamp` reproduces that. scalar_bytes: the largest effective scalar (`SCALAR_BYTES`).
    The ready nodes are a heap with lazy deletion, as XLA's multimap: a node whose priority
    changes is pushed again with its new stamp, and an entry whose stamp is no longer its node's
    is dropped when it surfaces. g: the `KernelGraph`; writes order: int32[n]; returns the
    number of nodes ordered. O((n + e) log n + e * max consumers).
    """
    n, in_ptr, in_idx, out_ptr, out_idx, succ_ptr, succ_idx, nbytes, resident = (
        g.num_nodes, g.in_ptr, g.in_idx, g.out_ptr, g.out_idx, g.succ_ptr, g.succ_idx, g.nbytes, g.resident)
    uses = np.empty(n, dtype=np.int64)  # unscheduled uses of each buffer
    for u in range(n):
        uses[u] = out_ptr[u + 1] - out_ptr[u]
    freed = np.zeros(n, dtype=np.int64)  # bytes v frees if run now
    for v in range(n):
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if not resident[u] and uses[u] == 1:
                freed[v] += nbytes[u]
    indeg = g.pred_cnt.copy()
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
def _lpmf_start(g, outdeg, size, to_free):
    """LPMF's initial state: writes outdeg (data uses left; a graph output keeps an implicit
    one), size (bytes of non-resident outputs) and to_free (bytes a node frees if run now);
    returns (live, max_mem): the resident bytes, and the peak Inductor starts from."""
    n = g.num_nodes
    live = np.int64(0)
    out_mem = np.int64(0)
    for u in range(n):
        outdeg[u] = g.out_ptr[u + 1] - g.out_ptr[u]
        if g.resident[u]:
            live += g.nbytes[u]
        elif outdeg[u] == 0:
            out_mem += g.nbytes[u]
            outdeg[u] = 1  # graph outputs keep an implicit use
    for v in range(n):
        if not g.resident[v]:
            size[v] = g.nbytes[v]
        for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
            u = g.in_idx[e]
            if not g.resident[u] and outdeg[u] == 1:
                to_free[v] += g.nbytes[u]
    # Inductor starts its peak at max(freeable inputs, outputs); here no input is freeable and
    # the resident bytes are a constant offset on both
    return live, live + out_mem


@numba.njit(**_JIT)
def _lpmf_release(g, v, outdeg, to_free, size, ready, rank, tb, tv, width):
    """After v runs: each non-resident input of v with one use left now frees its bytes when
    that reader runs; ready readers move in the segment tree. g: the `KernelGraph`."""
    in_ptr, in_idx, out_ptr, out_idx, nbytes, resident = g.in_ptr, g.in_idx, g.out_ptr, g.out_idx, g.nbytes, g.resident
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


@numba.njit(**_JIT)
def lpmf_order(g, order):
    """Inductor's least-peak-memory-first (`topological_sort_lpmf`).

    For each ready node: mem1 = live + its output (+ temp here) is the memory while it runs,
    and size - memory_to_free is the change after. Pick the node minimising
    (max(mem1, max_memory_so_far), size - memory_to_free, index): while some node fits under the
    peak so far, the one leaving the least memory, else the one raising the peak least.
    Resident tensors are a constant offset (never freed); outputs are never freed.
    The ready nodes are leaves of a segment tree in order of (size + temp, index), each holding
    (size - memory_to_free, index): the nodes that fit are a prefix, so the pick is a prefix
    minimum, or, when none fits, the minimum among the nodes of the smallest size + temp.
    g: the `KernelGraph`; writes order: int32[n]; returns the number of nodes ordered.
    O((n + e) log n + e * max consumers).
    """
    n, temp = g.num_nodes, g.temp
    outdeg = np.empty(n, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    to_free = np.zeros(n, dtype=np.int64)
    live, max_mem = _lpmf_start(g, outdeg, size, to_free)
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
    indeg = g.pred_cnt.copy()
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
        for e in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            w = g.succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[w] = True
                cnt += 1
                _seg_set(tb, tv, width, rank[w], size[w] - to_free[w], w)
        _lpmf_release(g, v, outdeg, to_free, size, ready, rank, tb, tv, width)
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
