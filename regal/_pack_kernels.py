"""The Numba kernels of `regal.packing`: overlaps, greedy placement, and the exact search.

Arrays and scalars in, arrays out; `regal.packing` validates first. A buffer i has a half-open
life [lower[i], upper[i]) (int64) and a size (int64 > 0). Two buffers *overlap* when their lives
intersect; a packing gives each an offset so that no two overlapping buffers share a byte.

The exact search is MiniMalloc's (Moffitt, "MiniMalloc: A Lightweight Memory Allocator for
Hardware-Accelerated Machine Learning", ASPLOS 2023), written anew for this module: a
depth-first search over *canonical* solutions (buffers placed in non-decreasing order of offset,
each at the lowest offset its placed neighbours leave it), with *spatial inference* (in every
section, a set of pairwise overlapping buffers, the floor plus the unplaced sizes must fit the
capacity) and *dominance pruning* (no buffer goes at or above an offset where some unplaced
buffer would fit entirely below it). Its naive twin is `tests/naive_pack.py`.
"""

import numba
import numpy as np

_JIT = dict(nogil=True, cache=True)
#: The search polls the clock through Numba's object mode, which holds the GIL.
_JIT_SEARCH = dict(cache=True)

#: Search statuses.
FOUND, INFEASIBLE, NODE_LIMIT, TIMEOUT = 0, 1, 2, 3


@numba.njit(**_JIT)
def overlaps(lower, upper):
    """The overlap graph as CSR (ptr: int64[m+1], idx: int64[*]), each pair listed both ways.
    O(m log m + pairs): buffers by start, each against the later-starting ones it reaches."""
    m = lower.shape[0]
    order = np.argsort(lower, kind="mergesort")
    deg = np.zeros(m, dtype=np.int64)
    for a in range(m):
        i = order[a]
        for b in range(a + 1, m):
            j = order[b]
            if lower[j] >= upper[i]:
                break
            deg[i] += 1
            deg[j] += 1
    ptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        ptr[i + 1] = ptr[i] + deg[i]
    fill = ptr[:m].copy()
    idx = np.empty(ptr[m], dtype=np.int64)
    for a in range(m):
        i = order[a]
        for b in range(a + 1, m):
            j = order[b]
            if lower[j] >= upper[i]:
                break
            idx[fill[i]] = j
            fill[i] += 1
            idx[fill[j]] = i
            fill[j] += 1
    return ptr, idx


@numba.njit(**_JIT)
def greedy(size, ptr, idx, order, best_fit):
    """Place the buffers in `order`, each at the lowest offset (best_fit: in the smallest gap)
    where it overlaps no placed neighbour, else just above them. Returns (offsets, arena)."""
    m = size.shape[0]
    off = np.full(m, -1, dtype=np.int64)
    lo = np.empty(m, dtype=np.int64)
    hi = np.empty(m, dtype=np.int64)
    arena = 0
    for t in range(m):
        i = order[t]
        c = 0
        for e in range(ptr[i], ptr[i + 1]):
            j = idx[e]
            if off[j] >= 0:
                lo[c] = off[j]
                hi[c] = off[j] + size[j]
                c += 1
        srt = np.argsort(lo[:c])
        cur = 0
        best = -1
        best_gap = 0
        for q in range(c):
            o = lo[srt[q]]
            gap = o - cur
            if gap >= size[i]:
                if not best_fit:
                    best = cur
                    break
                if best < 0 or gap < best_gap:
                    best = cur
                    best_gap = gap
            if hi[srt[q]] > cur:
                cur = hi[srt[q]]
        if best < 0:
            best = cur
        off[i] = best
        if best + size[i] > arena:
            arena = best + size[i]
    return off, arena


@numba.njit(**_JIT)
def busiest(totals, sec_lo, sec_hi):
    """int64[m]: the largest of totals[sec_lo[i]:sec_hi[i]] for each buffer i (0 if none)."""
    m = sec_lo.shape[0]
    out = np.zeros(m, dtype=np.int64)
    for i in range(m):
        for s in range(sec_lo[i], sec_hi[i]):
            if totals[s] > out[i]:
                out[i] = totals[s]
    return out


@numba.njit(**_JIT_SEARCH)
def _now():
    with numba.objmode(t="float64"):
        t = _clock()
    return t


def _clock():
    import time
    return time.perf_counter()


@numba.njit(**_JIT)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


#: Frame kinds of the search's explicit stack, and the results a finished frame hands its parent.
_DFS, _SPLIT = 0, 1
_NONE, _SUCCESS, _FAIL = 0, 1, 2


@numba.njit(**_JIT_SEARCH)
def search(size, ptr, idx, sec_lo, sec_hi, sec_ptr, sec_idx, width, area, heuristic, capacity, node_limit,
           deadline, out):
    """MiniMalloc's decision search: offsets for every buffer with offset + size <= capacity.

    sec_lo, sec_hi: int64[m], the sections [sec_lo, sec_hi) each buffer spans (contiguous);
    sec_ptr, sec_idx: each section's buffers (CSR); width, area: int64[m], each buffer's life
    length and size x life. heuristic: the static preorder of each partition, MiniMalloc's
    0 "WAT" (width, area, total), 1 "TAW", 2 "TWA", largest first, where "total" is the most
    unplaced bytes in one of the buffer's sections when the partition starts. node_limit:
    placements tried before giving up; deadline: a perf_counter() time (<= 0: none). Writes
    `out` (int64[m]) when found. Returns (status, nodes): FOUND, INFEASIBLE (the search space is
    exhausted: no packing fits the capacity), NODE_LIMIT or TIMEOUT.

    A depth-first search on an explicit stack of frames. A _DFS frame places the buffers of one
    partition (a range of sections; its buffers are the unplaced ones inside it) one at a time,
    trying them in order of (lowest offset, preorder rank); the frame keeps that order and its
    child re-sorts it by insertion (few keys change per placement). Once a placement leaves no
    unplaced buffer live across some section boundary (MiniMalloc's dynamic decomposition), a
    _SPLIT frame solves the pieces one after another: each piece that succeeds stays placed, and
    a piece that fails fails the placement that split them.
    """
    m = size.shape[0]
    S = sec_ptr.shape[0] - 1
    st = _State(size, S, m)
    off, min_off, floor, total, cuts, rank = st
    for s in range(S):
        for e in range(sec_ptr[s], sec_ptr[s + 1]):
            total[s] += size[sec_idx[e]]
        if total[s] > capacity:
            return INFEASIBLE, 0
    for i in range(m):
        for s in range(sec_lo[i], sec_hi[i] - 1):
            cuts[s] += 1
    F = 2 * m + 4
    f_kind = np.zeros(F, dtype=np.int64)
    f_lo = np.zeros(F, dtype=np.int64)
    f_hi = np.zeros(F, dtype=np.int64)
    f_choice = np.zeros(F, dtype=np.int64)
    f_last_off = np.zeros(F, dtype=np.int64)
    f_last_rank = np.zeros(F, dtype=np.int64)
    f_log = np.zeros(F, dtype=np.int64)
    f_hatless = np.zeros(F, dtype=np.bool_)
    f_ostart = np.zeros(F, dtype=np.int64)   # the frame's order: ordst[f_ostart : f_ostart + f_olen]
    f_olen = np.zeros(F, dtype=np.int64)
    f_mh = np.zeros(F, dtype=np.int64)       # the lowest top of its unplaced buffers (dominance)
    r_lo = np.zeros(S + 1, dtype=np.int64)   # a split's pieces, stacked: sections [r_lo, r_hi)
    r_hi = np.zeros(S + 1, dtype=np.int64)
    r_top = 0
    f_rstart = np.zeros(F, dtype=np.int64)
    f_rcount = np.zeros(F, dtype=np.int64)
    f_k = np.zeros(F, dtype=np.int64)
    log = np.empty((4 * m + 16, 3), dtype=np.int64)  # (kind, index, old value)
    top_log = 0
    ordst = np.empty(8 * m + 16, dtype=np.int64)
    o_top = 0
    mark = np.zeros(S, dtype=np.int64)
    affected = np.empty(S, dtype=np.int64)
    stamp = 0
    nodes = 0
    # the root: a split of all sections (already independent pieces are solved apart)
    top = 0
    f_kind[0] = _SPLIT
    f_rstart[0] = r_top
    r_top, cnt = _pieces(0, S, cuts, total, r_lo, r_hi, r_top)
    f_rcount[0] = cnt
    f_k[0] = -1
    result = _SUCCESS  # enters the root split as if a piece before the first succeeded
    while True:
        kind = f_kind[top]
        if kind == _SPLIT:
            if result == _FAIL:
                top_log = _rollback(f_log[top], top_log, log, st, size, sec_lo, sec_hi)
                r_top = f_rstart[top]
            else:  # a piece succeeded: start the next one, if any
                f_k[top] += 1
                if f_k[top] < f_rcount[top]:
                    j = f_rstart[top] + f_k[top]
                    if top_log + m + 4 > log.shape[0]:
                        log = _grow_log(log, top_log, top_log + m + 4)
                    top_log = _rerank(r_lo[j], r_hi[j], heuristic, width, area, top_log, log, st, sec_lo, sec_hi)
                    top += 1
                    _dfs_frame(top, r_lo[j], r_hi[j], f_kind, f_lo, f_hi, f_choice, f_last_off, f_last_rank)
                    ordst = _grow(ordst, o_top + m)
                    f_ostart[top] = o_top
                    f_olen[top], f_mh[top] = _fresh_order(r_lo[j], r_hi[j], ordst, o_top, st, size, sec_lo,
                                                          sec_hi)
                    o_top += f_olen[top]
                    result = _NONE
                    continue
                r_top = f_rstart[top]
                result = _SUCCESS
            if top == 0:
                if result == _SUCCESS:
                    out[:] = off
                    return FOUND, nodes
                return INFEASIBLE, nodes
            top -= 1
            continue
        # a _DFS frame
        if result == _SUCCESS:
            o_top = f_ostart[top]
            top -= 1
            continue
        if result == _FAIL:  # its last placement failed below: take it back, try the next
            top_log = _rollback(f_log[top], top_log, log, st, size, sec_lo, sec_hi)
            if f_hatless[top]:  # it touched no unplaced buffer: no other placement can do better
                o_top = f_ostart[top]
                top -= 1
                continue
        u = f_olen[top]
        base = f_ostart[top]
        if u == 0:
            result = _SUCCESS
            o_top = base
            top -= 1
            continue
        lo_s, hi_s, min_height = f_lo[top], f_hi[top], f_mh[top]
        p = f_choice[top] + 1
        result = _FAIL
        while p < u:
            i = ordst[base + p]
            o = min_off[i]
            if o < f_last_off[top] or (o == f_last_off[top] and rank[i] < f_last_rank[top]):
                p += 1
                continue  # canonical: placements in non-decreasing (offset, rank)
            if o >= min_height:
                break  # dominance: some unplaced buffer would fit entirely below
            f_choice[top] = p
            nodes += 1
            if nodes > node_limit:
                return NODE_LIMIT, nodes
            if deadline > 0 and (nodes & 1023) == 0 and _now() > deadline:
                return TIMEOUT, nodes
            need = top_log + (ptr[i + 1] - ptr[i]) + 2 * S + 4
            if need > log.shape[0]:
                log = _grow_log(log, top_log, need)
            f_log[top] = top_log
            top_log, stamp, split, hatless = _place(i, o, top_log, log, st, size, ptr, idx, sec_lo, sec_hi,
                                                    sec_ptr, sec_idx, mark, affected, stamp)
            f_hatless[top] = hatless
            if _feasible(o, lo_s, hi_s, floor, total, capacity):
                if split:
                    top += 1
                    f_kind[top] = _SPLIT
                    f_log[top] = top_log
                    f_rstart[top] = r_top
                    r_top, cnt = _pieces(lo_s, hi_s, cuts, total, r_lo, r_hi, r_top)
                    f_rcount[top] = cnt
                    f_k[top] = -1
                    result = _SUCCESS  # enters the split as if a piece before the first succeeded
                else:
                    ordst = _grow(ordst, o_top + u)
                    top += 1
                    _dfs_frame(top, lo_s, hi_s, f_kind, f_lo, f_hi, f_choice, f_last_off, f_last_rank)
                    f_last_off[top] = o
                    f_last_rank[top] = rank[i]
                    f_ostart[top] = o_top
                    f_olen[top] = u - 1
                    f_mh[top] = _child_order(ordst, base, u, i, o_top, st, size, m)
                    o_top += u - 1
                    result = _NONE
                break
            top_log = _rollback(f_log[top], top_log, log, st, size, sec_lo, sec_hi)
            if hatless:
                break
            p += 1
        if result == _FAIL:
            o_top = base
            top -= 1


@numba.njit(**_JIT)
def _grow_log(log, top_log, need):
    bigger = np.empty((max(need, 2 * log.shape[0]), 3), dtype=np.int64)
    bigger[:top_log] = log[:top_log]
    return bigger


@numba.njit(**_JIT)
def _rerank(lo_s, hi_s, heuristic, width, area, top_log, log, st, sec_lo, sec_hi):
    """Rank the unplaced buffers of sections [lo_s, hi_s) by the static preorder (0, 1, ...:
    MiniMalloc's SubSolve), logging the old ranks; returns the log's new top."""
    off, min_off, floor, total, cuts, rank = st
    m = off.shape[0]
    members = np.empty(m, dtype=np.int64)
    u = 0
    for i in range(m):
        if off[i] < 0 and sec_lo[i] >= lo_s and sec_hi[i] <= hi_s:
            members[u] = i
            u += 1
    members = members[:u]
    tot = np.zeros(u, dtype=np.int64)
    for a in range(u):
        i = members[a]
        for s in range(sec_lo[i], sec_hi[i]):
            if total[s] > tot[a]:
                tot[a] = total[s]
    # keys, most significant first: 0 WAT, 1 TAW, 2 TWA; stable sorts from the least significant
    k1 = np.empty(u, dtype=np.int64)
    k2 = np.empty(u, dtype=np.int64)
    k3 = np.empty(u, dtype=np.int64)
    for a in range(u):
        w, ar, t = width[members[a]], area[members[a]], tot[a]
        if heuristic == 0:
            k1[a], k2[a], k3[a] = w, ar, t
        elif heuristic == 1:
            k1[a], k2[a], k3[a] = t, ar, w
        else:
            k1[a], k2[a], k3[a] = t, w, ar
    perm = np.arange(u)
    for key in (k3, k2, k1):
        perm = perm[np.argsort(-key[perm], kind="mergesort")]
    for a in range(u):
        i = members[perm[a]]
        log[top_log, 0] = 3
        log[top_log, 1] = i
        log[top_log, 2] = rank[i]
        top_log += 1
        rank[i] = a
    return top_log


@numba.njit(**_JIT)
def _fresh_order(lo_s, hi_s, ordst, start, st, size, sec_lo, sec_hi):
    """Write the unplaced buffers of sections [lo_s, hi_s) to ordst[start:], by (lowest
    offset, rank); returns (count, their lowest top)."""
    off, min_off, floor, total, cuts, rank = st
    m = off.shape[0]
    u = 0
    mh = np.iinfo(np.int64).max
    for i in range(m):
        if off[i] < 0 and sec_lo[i] >= lo_s and sec_hi[i] <= hi_s:
            ordst[start + u] = i
            u += 1
            if min_off[i] + size[i] < mh:
                mh = min_off[i] + size[i]
    keys = np.empty(u, dtype=np.int64)
    for a in range(u):
        keys[a] = min_off[ordst[start + a]] * m + rank[ordst[start + a]]
    srt = np.argsort(keys)
    tmp = ordst[start:start + u].copy()
    for a in range(u):
        ordst[start + a] = tmp[srt[a]]
    return u, mh


@numba.njit(**_JIT)
def _child_order(ordst, base, u, placed, start, st, size, m):
    """Copy the parent's order (ordst[base:base+u]) less the placed buffer to ordst[start:] and
    re-sort it by insertion (keys only grow, and few of them); returns the lowest top."""
    off, min_off, floor, total, cuts, rank = st
    c = 0
    mh = np.iinfo(np.int64).max
    for a in range(u):
        i = ordst[base + a]
        if i == placed:
            continue
        key = min_off[i] * m + rank[i]
        b = start + c
        while b > start:
            j = ordst[b - 1]
            if min_off[j] * m + rank[j] <= key:
                break
            ordst[b] = j
            b -= 1
        ordst[b] = i
        c += 1
        if min_off[i] + size[i] < mh:
            mh = min_off[i] + size[i]
    return mh


@numba.njit(**_JIT)
def _State(size, S, m):
    """(off, min_off, floor, total, cuts, rank): the search's mutable state."""
    return (np.full(m, -1, dtype=np.int64), np.zeros(m, dtype=np.int64), np.zeros(S, dtype=np.int64),
            np.zeros(S, dtype=np.int64), np.zeros(max(S - 1, 1), dtype=np.int64), np.zeros(m, dtype=np.int64))


@numba.njit(**_JIT)
def _dfs_frame(top, lo_s, hi_s, f_kind, f_lo, f_hi, f_choice, f_last_off, f_last_rank):
    f_kind[top] = _DFS
    f_lo[top] = lo_s
    f_hi[top] = hi_s
    f_choice[top] = -1
    f_last_off[top] = -1
    f_last_rank[top] = -1


@numba.njit(**_JIT)
def _pieces(lo_s, hi_s, cuts, total, r_lo, r_hi, r_top):
    """Push the pieces of sections [lo_s, hi_s) that no unplaced buffer joins and that hold an
    unplaced buffer; returns (new top, count)."""
    cnt = 0
    a = lo_s
    for s in range(lo_s, hi_s):
        if s == hi_s - 1 or cuts[s] == 0:
            busy = False
            for q in range(a, s + 1):
                if total[q] > 0:
                    busy = True
                    break
            if busy:
                r_lo[r_top] = a
                r_hi[r_top] = s + 1
                r_top += 1
                cnt += 1
            a = s + 1
    return r_top, cnt


@numba.njit(**_JIT)
def _place(i, o, top_log, log, st, size, ptr, idx, sec_lo, sec_hi, sec_ptr, sec_idx, mark, affected, stamp):
    """Place buffer i at offset o, logging every change; returns (log top, stamp, whether a
    section boundary is no longer crossed by any unplaced buffer, whether no
    unplaced buffer overlaps i: MiniMalloc's "hatless" placement, whose failure ends the
    frame, since nothing else it could place there changes what is left)."""
    off, min_off, floor, total, cuts, rank = st
    big = np.iinfo(np.int64).max
    log[top_log, 0] = 2
    log[top_log, 1] = i
    top_log += 1
    off[i] = o
    h = o + size[i]
    stamp += 1
    na = 0
    hatless = True
    for e in range(ptr[i], ptr[i + 1]):
        j = idx[e]
        if off[j] < 0:
            hatless = False
        if off[j] < 0 and min_off[j] < h:
            log[top_log, 0] = 0
            log[top_log, 1] = j
            log[top_log, 2] = min_off[j]
            top_log += 1
            min_off[j] = h
            for s in range(sec_lo[j], sec_hi[j]):
                if mark[s] != stamp:
                    mark[s] = stamp
                    affected[na] = s
                    na += 1
    for s in range(sec_lo[i], sec_hi[i]):
        log[top_log, 0] = 1
        log[top_log, 1] = s
        log[top_log, 2] = floor[s]
        top_log += 1
        floor[s] = h
        total[s] -= size[i]
    split = False
    for s in range(sec_lo[i], sec_hi[i] - 1):
        cuts[s] -= 1
        if cuts[s] == 0:
            split = True
    for a in range(na):  # a section's floor is at least its unplaced buffers' lowest offset
        s = affected[a]
        lowest = big
        for e in range(sec_ptr[s], sec_ptr[s + 1]):
            j = sec_idx[e]
            if off[j] < 0 and min_off[j] < lowest:
                lowest = min_off[j]
        if lowest != big and floor[s] < lowest:
            log[top_log, 0] = 1
            log[top_log, 1] = s
            log[top_log, 2] = floor[s]
            top_log += 1
            floor[s] = lowest
    return top_log, stamp, split, hatless


@numba.njit(**_JIT)
def _feasible(o, lo_s, hi_s, floor, total, capacity):
    """Spatial inference: in every section of the partition, what is left stacks above its floor
    (and above o: later placements never go lower) within the capacity."""
    for s in range(lo_s, hi_s):
        f = floor[s] if floor[s] > o else o
        if floor[s] > capacity or (total[s] > 0 and f + total[s] > capacity):
            return False
    return True


@numba.njit(**_JIT)
def _rollback(to, top_log, log, st, size, sec_lo, sec_hi):
    """Undo the log down to position `to`; returns `to`."""
    off, min_off, floor, total, cuts, rank = st
    for t in range(top_log - 1, to - 1, -1):
        kind = log[t, 0]
        if kind == 0:
            min_off[log[t, 1]] = log[t, 2]
        elif kind == 1:
            floor[log[t, 1]] = log[t, 2]
        elif kind == 3:
            rank[log[t, 1]] = log[t, 2]
        else:
            i = log[t, 1]
            for s in range(sec_lo[i], sec_hi[i]):
                total[s] += size[i]
            for s in range(sec_lo[i], sec_hi[i] - 1):
                cuts[s] += 1
            off[i] = -1
    return to
