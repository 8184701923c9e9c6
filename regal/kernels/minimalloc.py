"""MiniMalloc's exact search for `regal.packing` (Numba): offsets for every buffer of a part
within a capacity, or a proof that none fit.

The search is MiniMalloc's (Moffitt, "MiniMalloc: A Lightweight Memory Allocator for
Hardware-Accelerated Machine Learning", ASPLOS 2023), written anew for this module: a
depth-first search over *canonical* solutions (buffers placed in non-decreasing order of offset,
each at the lowest offset its placed neighbours leave it), with *spatial inference* (in every
section, a set of pairwise overlapping buffers, the floor plus the unplaced sizes must fit the
capacity) and *dominance pruning* (no buffer goes at or above an offset where some unplaced
buffer would fit entirely below it). Its naive twin is `tests/naive_pack.py`.

Structs in, arrays out: the part (`Buffers`), the search's state (`_State`, every change logged
so that it can be undone) and its explicit stack of frames (`_Frames`); the search's few
scalars live in one int64 array (`_TOP`, ...) so that its named steps can update them.
"""

from typing import NamedTuple

import numba
import numpy as np

from regal._jit import JIT as _JIT

#: The search's steps are compiled into it (`forceinline`), the one of every node without
#: reference counting (it allocates nothing): a call, or the counting, of the structs' arrays at
#: every node costs ~5 %. It releases the GIL: a caller's thread watches the clock and signals
#: and sets the `stop` flag the search reads every 1,024 placements.
_JIT_SEARCH = dict(cache=True, nogil=True)
_DFS_STEP = dict(_nrt=False, forceinline=True, **_JIT_SEARCH)
_SPLIT_STEP = dict(forceinline=True, **_JIT)

#: Search statuses.
FOUND, INFEASIBLE, NODE_LIMIT, TIMEOUT = 0, 1, 2, 3
_GOING = -1  # a step's status when the search goes on

#: Frame kinds of the search's explicit stack, and the results a finished frame hands its parent.
_DFS, _SPLIT = 0, 1
_NONE, _SUCCESS, _FAIL = 0, 1, 2

#: The search's scalars, at these positions of its int64 array: the top frame, the result the
#: last finished frame handed up, the tops of the undo log, of the split pieces and of the order
#: stack, placements tried, and the stamp of `_place`'s section marks.
_TOP, _RESULT, _LOG_TOP, _R_TOP, _O_TOP, _NODES, _STAMP = range(7)


class Buffers(NamedTuple):
    """One part of a packing instance as the search reads it (m buffers, S sections)."""
    size: np.ndarray     # int64[m]    bytes
    ptr: np.ndarray      # int64[m+1]  the overlap graph (CSR, each pair listed both ways)
    idx: np.ndarray      # int64[*]
    sec_lo: np.ndarray   # int64[m]    the sections [sec_lo, sec_hi) each buffer spans (contiguous)
    sec_hi: np.ndarray   # int64[m]
    sec_ptr: np.ndarray  # int64[S+1]  each section's buffers (CSR)
    sec_idx: np.ndarray  # int64[*]
    width: np.ndarray    # int64[m]    life length
    area: np.ndarray     # int64[m]    size x life length


class _State(NamedTuple):
    """The search's mutable state (m buffers, S sections)."""
    off: np.ndarray      # int64[m]    offset of each placed buffer, -1 unplaced
    min_off: np.ndarray  # int64[m]    the lowest offset its placed neighbours leave it
    floor: np.ndarray    # int64[S]    nothing unplaced goes below it
    total: np.ndarray    # int64[S]    unplaced bytes
    cuts: np.ndarray     # int64[max(S-1, 1)]  unplaced buffers live across each section boundary
    rank: np.ndarray     # int64[m]    rank in the static preorder of its partition


class _Frames(NamedTuple):
    """The explicit stack (F frames), and the pieces of the splits on it, stacked."""
    kind: np.ndarray       # int64[F]  _DFS or _SPLIT
    lo: np.ndarray         # int64[F]  the frame's sections [lo, hi)
    hi: np.ndarray         # int64[F]
    choice: np.ndarray     # int64[F]  a _DFS frame's position in its order of the last placement
    last_off: np.ndarray   # int64[F]  offset and rank of the placement that made it (canonical)
    last_rank: np.ndarray  # int64[F]
    log: np.ndarray        # int64[F]  the undo log's top before its last placement
    hatless: np.ndarray    # bool[F]   its last placement touched no unplaced buffer
    ostart: np.ndarray     # int64[F]  its order: ordst[ostart : ostart + olen]
    olen: np.ndarray       # int64[F]
    mh: np.ndarray         # int64[F]  the lowest top of its unplaced buffers (dominance)
    rstart: np.ndarray     # int64[F]  a _SPLIT frame's pieces: r_lo/r_hi[rstart : rstart + rcount]
    rcount: np.ndarray     # int64[F]
    k: np.ndarray          # int64[F]  the piece it is solving
    r_lo: np.ndarray       # int64[S+1]  pieces: sections [r_lo, r_hi)
    r_hi: np.ndarray       # int64[S+1]


@numba.njit(**_JIT)
def _new(m, S):
    """The search's state (m buffers, S sections) and its empty stack of frames."""
    z, F = np.zeros, 2 * m + 4
    return (_State(np.full(m, -1, dtype=np.int64), z(m, np.int64), z(S, np.int64), z(S, np.int64),
                   z(max(S - 1, 1), np.int64), z(m, np.int64)),
            _Frames(z(F, np.int64), z(F, np.int64), z(F, np.int64), z(F, np.int64), z(F, np.int64), z(F, np.int64),
                    z(F, np.int64), z(F, np.bool_), z(F, np.int64), z(F, np.int64), z(F, np.int64), z(F, np.int64),
                    z(F, np.int64), z(F, np.int64), z(S + 1, np.int64), z(S + 1, np.int64)))


@numba.njit(**_JIT)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


@numba.njit(**_JIT)
def _grow_log(log, top_log, need):
    if need <= log.shape[0]:
        return log
    bigger = np.empty((max(need, 2 * log.shape[0]), 3), dtype=np.int64)
    bigger[:top_log] = log[:top_log]
    return bigger


@numba.njit(**_JIT_SEARCH)
def search(b, heuristic, capacity, node_limit, out, stop):
    """MiniMalloc's decision search: offsets for every buffer with offset + size <= capacity.

    b: the part (`Buffers`). heuristic: the static preorder of each partition, MiniMalloc's
    0 "WAT" (width, area, total), 1 "TAW", 2 "TWA", largest first, where "total" is the most
    unplaced bytes in one of the buffer's sections when the partition starts. node_limit:
    placements tried before giving up. Writes `out` (int64[m]) when found; stop: int64[1], read
    every 1,024 placements (non-zero: give up, TIMEOUT). capacity <= MAX_VALUE (2**62: offsets
    plus sizes stay exact). Returns (status, nodes): FOUND, INFEASIBLE (the search space is
    exhausted: no packing fits the capacity), NODE_LIMIT or TIMEOUT.

    A depth-first search on an explicit stack of frames. A _DFS frame places the buffers of one
    partition (a range of sections; its buffers are the unplaced ones inside it) one at a time,
    trying them in order of (lowest offset, preorder rank); the frame keeps that order and its
    child re-sorts it by insertion (few keys change per placement). Once a placement leaves no
    unplaced buffer live across some section boundary (MiniMalloc's dynamic decomposition), a
    _SPLIT frame solves the pieces one after another: each piece that succeeds stays placed, and
    a piece that fails fails the placement that split them.
    """
    m = b.size.shape[0]
    S = b.sec_ptr.shape[0] - 1
    st, fr = _new(m, S)
    for s in range(S):
        for e in range(b.sec_ptr[s], b.sec_ptr[s + 1]):
            st.total[s] += b.size[b.sec_idx[e]]
        if st.total[s] > capacity:
            return INFEASIBLE, 0
    for i in range(m):
        for s in range(b.sec_lo[i], b.sec_hi[i] - 1):
            st.cuts[s] += 1
    max_deg = np.max(np.diff(b.ptr)) if m > 0 else 0
    c = np.zeros(7, dtype=np.int64)
    log = np.empty((4 * m + 16, 3), dtype=np.int64)  # (kind, index, old value)
    ordst = np.empty(8 * m + 16, dtype=np.int64)
    mark = np.zeros(S, dtype=np.int64)
    affected = np.empty(S, dtype=np.int64)
    # the root: a split of all sections (already independent pieces are solved apart), entered
    # as if a piece before the first succeeded
    _push_split(0, 0, S, c, fr, st)
    while True:
        top = c[_TOP]
        if fr.kind[top] == _SPLIT:
            log = _grow_log(log, c[_LOG_TOP], c[_LOG_TOP] + m + 4)
            ordst = _grow(ordst, c[_O_TOP] + m)
            status = _split_step(c, fr, st, b, log, ordst, heuristic)
            if status == FOUND:
                out[:] = st.off
        else:
            log = _grow_log(log, c[_LOG_TOP], c[_LOG_TOP] + max_deg + 2 * S + 4)
            ordst = _grow(ordst, c[_O_TOP] + fr.olen[top])
            status = _dfs_step(c, fr, st, b, log, ordst, mark, affected, capacity, node_limit, stop)
        if status != _GOING:
            return status, c[_NODES]


@numba.njit(**_JIT)
def _push_split(top, lo_s, hi_s, c, fr, st):
    """Make frame `top` a split of sections [lo_s, hi_s), entered as if a piece before its first
    succeeded."""
    fr.kind[top] = _SPLIT
    fr.log[top] = c[_LOG_TOP]
    fr.rstart[top] = c[_R_TOP]
    c[_R_TOP], fr.rcount[top] = _pieces(lo_s, hi_s, st.cuts, st.total, fr.r_lo, fr.r_hi, c[_R_TOP])
    fr.k[top] = -1
    c[_TOP] = top
    c[_RESULT] = _SUCCESS


@numba.njit(**_SPLIT_STEP)
def _split_step(c, fr, st, b, log, ordst, heuristic):
    """One visit of the top _SPLIT frame: undo it when a piece failed, else start its next piece
    (a _DFS frame over the piece, its buffers re-ranked), else hand success up. The log has room
    for m + 4 more entries and the order stack for m more."""
    top = c[_TOP]
    if c[_RESULT] == _FAIL:
        c[_LOG_TOP] = _rollback(fr.log[top], c[_LOG_TOP], log, st, b)
        c[_R_TOP] = fr.rstart[top]
    else:  # a piece succeeded: start the next one, if any
        fr.k[top] += 1
        if fr.k[top] < fr.rcount[top]:
            j = fr.rstart[top] + fr.k[top]
            lo_s, hi_s = fr.r_lo[j], fr.r_hi[j]
            c[_LOG_TOP] = _rerank(lo_s, hi_s, heuristic, c[_LOG_TOP], log, st, b)
            top += 1
            _dfs_frame(top, lo_s, hi_s, fr)
            fr.ostart[top] = c[_O_TOP]
            fr.olen[top], fr.mh[top] = _fresh_order(lo_s, hi_s, ordst, c[_O_TOP], st, b)
            c[_O_TOP] += fr.olen[top]
            c[_TOP] = top
            c[_RESULT] = _NONE
            return _GOING
        c[_R_TOP] = fr.rstart[top]
        c[_RESULT] = _SUCCESS
    if top == 0:
        return FOUND if c[_RESULT] == _SUCCESS else INFEASIBLE
    c[_TOP] = top - 1
    return _GOING


@numba.njit(**_DFS_STEP)
def _dfs_step(c, fr, st, b, log, ordst, mark, affected, capacity, node_limit, stop):
    """One visit of the top _DFS frame: pop it when its child succeeded, else (its child failed:
    undo that placement) place its next buffer, in canonical order, that passes spatial
    inference and push the frame that goes on from there; pop it, failed, when none is left.
    The log has room for one placement and the order stack for the frame's order."""
    top = c[_TOP]
    base = fr.ostart[top]
    if c[_RESULT] == _SUCCESS:
        c[_O_TOP] = base
        c[_TOP] = top - 1
        return _GOING
    if c[_RESULT] == _FAIL:  # its last placement failed below: take it back, try the next
        c[_LOG_TOP] = _rollback(fr.log[top], c[_LOG_TOP], log, st, b)
        if fr.hatless[top]:  # it touched no unplaced buffer: no other placement can do better
            c[_O_TOP] = base
            c[_TOP] = top - 1
            return _GOING
    u = fr.olen[top]
    c[_RESULT] = _SUCCESS if u == 0 else _FAIL
    p = fr.choice[top] + 1
    while p < u:
        i = ordst[base + p]
        o = st.min_off[i]
        if o < fr.last_off[top] or (o == fr.last_off[top] and st.rank[i] < fr.last_rank[top]):
            p += 1
            continue  # canonical: placements in non-decreasing (offset, rank)
        if o >= fr.mh[top]:
            break  # dominance: some unplaced buffer would fit entirely below
        fr.choice[top] = p
        c[_NODES] += 1
        if c[_NODES] > node_limit:
            return NODE_LIMIT
        if (c[_NODES] & 1023) == 0 and stop[0] != 0:
            return TIMEOUT
        fr.log[top] = c[_LOG_TOP]
        c[_LOG_TOP], c[_STAMP], split, hatless = _place(i, o, c[_LOG_TOP], log, st, b, mark, affected, c[_STAMP])
        fr.hatless[top] = hatless
        if _feasible(o, fr.lo[top], fr.hi[top], st.floor, st.total, capacity):
            if split:
                _push_split(top + 1, fr.lo[top], fr.hi[top], c, fr, st)
            else:
                _push_child(top + 1, i, o, u, base, c, fr, st, b, ordst)
            return _GOING
        c[_LOG_TOP] = _rollback(fr.log[top], c[_LOG_TOP], log, st, b)
        if hatless:
            break
        p += 1
    c[_O_TOP] = base
    c[_TOP] = top - 1
    return _GOING


@numba.njit(**_JIT)
def _push_child(top, placed, o, u, base, c, fr, st, b, ordst):
    """Make frame `top` the _DFS frame that goes on after buffer `placed` went at offset o, its
    order its parent's (ordst[base:base+u]) less `placed`."""
    _dfs_frame(top, fr.lo[top - 1], fr.hi[top - 1], fr)
    fr.last_off[top] = o
    fr.last_rank[top] = st.rank[placed]
    fr.ostart[top] = c[_O_TOP]
    fr.olen[top] = u - 1
    fr.mh[top] = _child_order(ordst, base, u, placed, c[_O_TOP], st, b.size, b.size.shape[0])
    c[_O_TOP] += u - 1
    c[_TOP] = top
    c[_RESULT] = _NONE


@numba.njit(**_JIT)
def _dfs_frame(top, lo_s, hi_s, fr):
    fr.kind[top] = _DFS
    fr.lo[top] = lo_s
    fr.hi[top] = hi_s
    fr.choice[top] = -1
    fr.last_off[top] = -1
    fr.last_rank[top] = -1


@numba.njit(**_JIT)
def _rerank(lo_s, hi_s, heuristic, top_log, log, st, b):
    """Rank the unplaced buffers of sections [lo_s, hi_s) by the static preorder (0, 1, ...:
    MiniMalloc's SubSolve), logging the old ranks; returns the log's new top."""
    m = st.off.shape[0]
    members = np.empty(m, dtype=np.int64)
    u = 0
    for i in range(m):
        if st.off[i] < 0 and b.sec_lo[i] >= lo_s and b.sec_hi[i] <= hi_s:
            members[u] = i
            u += 1
    members = members[:u]
    tot = np.zeros(u, dtype=np.int64)
    for a in range(u):
        i = members[a]
        for s in range(b.sec_lo[i], b.sec_hi[i]):
            if st.total[s] > tot[a]:
                tot[a] = st.total[s]
    # keys, most significant first: 0 WAT, 1 TAW, 2 TWA; stable sorts from the least significant
    k1 = np.empty(u, dtype=np.int64)
    k2 = np.empty(u, dtype=np.int64)
    k3 = np.empty(u, dtype=np.int64)
    for a in range(u):
        w, ar, t = b.width[members[a]], b.area[members[a]], tot[a]
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
        log[top_log, 2] = st.rank[i]
        top_log += 1
        st.rank[i] = a
    return top_log


@numba.njit(**_JIT)
def _fresh_order(lo_s, hi_s, ordst, start, st, b):
    """Write the unplaced buffers of sections [lo_s, hi_s) to ordst[start:], by (lowest
    offset, rank); returns (count, their lowest top)."""
    m = st.off.shape[0]
    u = 0
    mh = np.iinfo(np.int64).max
    for i in range(m):
        if st.off[i] < 0 and b.sec_lo[i] >= lo_s and b.sec_hi[i] <= hi_s:
            ordst[start + u] = i
            u += 1
            if st.min_off[i] + b.size[i] < mh:
                mh = st.min_off[i] + b.size[i]
    tmp = ordst[start:start + u].copy()
    ranks = np.empty(u, dtype=np.int64)
    offs = np.empty(u, dtype=np.int64)
    for a in range(u):
        ranks[a] = st.rank[tmp[a]]
    by_rank = np.argsort(ranks, kind="mergesort")  # (offset, rank) as two stable sorts: no product
    for a in range(u):
        offs[a] = st.min_off[tmp[by_rank[a]]]
    srt = by_rank[np.argsort(offs, kind="mergesort")]
    for a in range(u):
        ordst[start + a] = tmp[srt[a]]
    return u, mh


@numba.njit(**_JIT)
def _child_order(ordst, base, u, placed, start, st, size, m):
    """Copy the parent's order (ordst[base:base+u]) less the placed buffer to ordst[start:] and
    re-sort it by insertion (keys only grow, and few of them); returns the lowest top."""
    min_off, rank = st.min_off, st.rank
    c = 0
    mh = np.iinfo(np.int64).max
    for a in range(u):
        i = ordst[base + a]
        if i == placed:
            continue
        j = start + c
        while j > start:
            q = ordst[j - 1]
            if min_off[q] < min_off[i] or (min_off[q] == min_off[i] and rank[q] <= rank[i]):
                break
            ordst[j] = q
            j -= 1
        ordst[j] = i
        c += 1
        if min_off[i] + size[i] < mh:
            mh = min_off[i] + size[i]
    return mh


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
def _place(i, o, top_log, log, st, b, mark, affected, stamp):
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
    h = o + b.size[i]
    stamp += 1
    na = 0
    hatless = True
    for e in range(b.ptr[i], b.ptr[i + 1]):
        j = b.idx[e]
        if off[j] < 0:
            hatless = False
        if off[j] < 0 and min_off[j] < h:
            log[top_log, 0] = 0
            log[top_log, 1] = j
            log[top_log, 2] = min_off[j]
            top_log += 1
            min_off[j] = h
            for s in range(b.sec_lo[j], b.sec_hi[j]):
                if mark[s] != stamp:
                    mark[s] = stamp
                    affected[na] = s
                    na += 1
    for s in range(b.sec_lo[i], b.sec_hi[i]):
        log[top_log, 0] = 1
        log[top_log, 1] = s
        log[top_log, 2] = floor[s]
        top_log += 1
        floor[s] = h
        total[s] -= b.size[i]
    split = False
    for s in range(b.sec_lo[i], b.sec_hi[i] - 1):
        cuts[s] -= 1
        if cuts[s] == 0:
            split = True
    for a in range(na):  # a section's floor is at least its unplaced buffers' lowest offset
        s = affected[a]
        lowest = big
        for e in range(b.sec_ptr[s], b.sec_ptr[s + 1]):
            j = b.sec_idx[e]
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
        if floor[s] > capacity or (total[s] > 0 and f > capacity - total[s]):  # no sum: exact to 2**63
            return False
    return True


@numba.njit(**_JIT)
def _rollback(to, top_log, log, st, b):
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
            for s in range(b.sec_lo[i], b.sec_hi[i]):
                total[s] += b.size[i]
            for s in range(b.sec_lo[i], b.sec_hi[i] - 1):
                cuts[s] += 1
            off[i] = -1
    return to
