"""The kernels of `regal.allocation` (SPEC.md section 3a): XLA-style buffer assignment's pass
(`assign`: each value, largest first, into the first allocation free over its live interval,
operands' allocations first, then the newest; the rest deferred to the heap) and the heap's
best fit (`best_fit`). Allocations are kept in blocks of `BLOCK` with their free gaps, so a
block none of whose allocations is free is skipped in one binary search (issue 36); the
quadratic pass they replace is the naive twin in tests/naive_allocation.py.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from regal._jit import JIT

#: Allocations per block of the assignment's search (`_choose`).
BLOCK = 32
_NEVER = 1 << 62   # a gap's end past the last step


class Values(NamedTuple):
    """The values to assign, each: its size and live interval [start, end]."""
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray


class Links(NamedTuple):
    """What ties the values (CSR): each one's operands (`op_*`), the values it may share an
    allocation with (`sh_*`) and the reverse of those (`rs_*`)."""
    op_ptr: np.ndarray
    op_idx: np.ndarray
    sh_ptr: np.ndarray
    sh_idx: np.ndarray
    rs_ptr: np.ndarray
    rs_idx: np.ndarray


@njit(**JIT)
def _shares(user, operand, sh_ptr, sh_idx):
    for j in range(sh_ptr[user], sh_ptr[user + 1]):
        if sh_idx[j] == operand:
            return True
    return False


@njit(**JIT)
def _interferes(a, b, start, end, sh_ptr, sh_idx):
    if end[a] < start[b] or end[b] < start[a]:
        return False
    if end[a] == start[b] and _shares(b, a, sh_ptr, sh_idx):
        return False
    if end[b] == start[a] and _shares(a, b, sh_ptr, sh_idx):
        return False
    return True


@njit(**JIT)
def _free(b, mem, lo, hi, start, end, sh_ptr, sh_idx):
    """Whether no value of mem[lo:hi] (one allocation's, sorted by (start, end): their ends are
    then sorted too, since no two overlap by more than a step) interferes with b. Only those
    whose [start, end] meets b's can: a binary search finds the first, O(log) in all."""
    l, h = lo, hi
    while l < h:
        mid = (l + h) >> 1
        if end[mem[mid]] < start[b]:
            l = mid + 1
        else:
            h = mid
    while l < hi and start[mem[l]] <= end[b]:
        if _interferes(mem[l], b, start, end, sh_ptr, sh_idx):
            return False
        l += 1
    return True


@njit(**JIT)
def _room(pool, used, off, num, cap, x, width):
    """(pool, used) with room for one more entry (`width` int64) in segment x: a full segment
    moves to the end of the pool with twice the capacity (the pool doubles when it must)."""
    if num[x] < cap[x]:
        return pool, used
    new_cap = max(4, 2 * cap[x])
    if used + new_cap * width > pool.shape[0]:
        bigger = np.empty(max(used + new_cap * width, 2 * pool.shape[0]), dtype=np.int64)
        bigger[:used] = pool[:used]
        pool = bigger
    pool[used:used + num[x] * width] = pool[off[x]:off[x] + num[x] * width]
    off[x], cap[x] = used, new_cap
    return pool, used + new_cap * width


@njit(**JIT)
def _gap_add(gap, o, n, lo, hi, alloc, sign):
    """Adds (sign 1) or removes (sign -1) the gap (lo, hi) of `alloc` in a block's list at
    gap[o:]: n entries (lo, hi, alloc, the running max of hi), sorted by lo. Returns n after."""
    l, h = 0, n
    while l < h:
        mid = (l + h) >> 1
        if gap[o + 4 * mid] < lo or (sign > 0 and gap[o + 4 * mid] == lo):
            l = mid + 1
        else:
            h = mid
    at = o + 4 * l
    if sign > 0:
        gap[at + 4:o + 4 * n + 4] = gap[at:o + 4 * n].copy()
        gap[at], gap[at + 1], gap[at + 2] = lo, hi, alloc
        n += 1
    else:
        while gap[at + 1] != hi or gap[at + 2] != alloc:
            at += 4
        gap[at:o + 4 * n - 4] = gap[at + 4:o + 4 * n].copy()
        n -= 1
    top = gap[at - 1] if at > o else -1
    for i in range(at, o + 4 * n, 4):
        top = max(top, gap[i + 1])
        gap[i + 3] = top
    return n


@njit(**JIT)
def _gap_over(gap, o, n, s, e):
    """Whether a gap of the block's list at gap[o:] (n entries) holds all of [s, e]: the gaps
    that start before s reach past e at most as far as their running max."""
    l, h = 0, n
    while l < h:
        mid = (l + h) >> 1
        if gap[o + 4 * mid] < s:
            l = mid + 1
        else:
            h = mid
    return l > 0 and gap[o + 4 * l - 1] > e


@njit(**JIT)
def _split(gap, used, g_off, g_num, g_cap, alloc, lo, hi, s, e):
    """Allocation `alloc`'s gap (lo, hi) taken by a value over [s, e]: (lo, s) and (e, hi) are
    left, each kept in its block's list when it holds a step. Returns (gap, used)."""
    x = alloc // BLOCK
    if hi - lo > 1:
        g_num[x] = _gap_add(gap, g_off[x], g_num[x], lo, hi, alloc, -1)
    for a, z in ((lo, s), (e, hi)):
        if z - a > 1:
            gap, used = _room(gap, used, g_off, g_num, g_cap, x, 4)
            g_num[x] = _gap_add(gap, g_off[x], g_num[x], a, z, alloc, 1)
    return gap, used


@njit(**JIT)
def _near(b, x, where, sh_ptr, sh_idx, rs_ptr, rs_idx):
    """Whether block x holds a value that b may only touch (b takes it over, or it takes b
    over): the one way an allocation without a gap over b's interval can still take b."""
    return _in_block(b, x, where, sh_ptr, sh_idx) or _in_block(b, x, where, rs_ptr, rs_idx)


@njit(**JIT)
def _in_block(b, x, where, ptr, idx):
    for j in range(ptr[b], ptr[b + 1]):
        if where[idx[j]] >= 0 and where[idx[j]] // BLOCK == x:
            return True
    return False


@njit(**JIT)
def _reverse(ptr, idx, m):
    """The transposed CSR of (ptr, idx) over m rows."""
    rp = np.zeros(m + 1, dtype=np.int64)
    for j in range(ptr[m]):
        rp[idx[j] + 1] += 1
    rp = np.cumsum(rp)
    ri = np.empty(ptr[m], dtype=np.int64)
    fill = rp[:-1].copy()
    for u in range(m):
        for j in range(ptr[u], ptr[u + 1]):
            ri[fill[idx[j]]] = u
            fill[idx[j]] += 1
    return rp, ri


@njit(**JIT)
def _choose(b, vals, links, where, alloc_size, count, mem, m_off, m_num, gap, g_off, g_num):
    """Rule 2's allocation for the temporary b, -1 none: the first of its operands' allocations
    that takes it, else the most recent allocation that does. Blocks of BLOCK allocations are
    skipped whole when none of their gaps holds b's interval and none holds a value b may only
    touch; the rest are tried one by one, newest first, as before. vals: the `Values`; links:
    the `Links`."""
    size, start, end = vals.size, vals.start, vals.end
    op_ptr, op_idx, sh_ptr, sh_idx, rs_ptr, rs_idx = (links.op_ptr, links.op_idx, links.sh_ptr, links.sh_idx,
                                                      links.rs_ptr, links.rs_idx)
    for j in range(op_ptr[b], op_ptr[b + 1]):
        a = where[op_idx[j]]
        if a >= 0 and size[b] <= alloc_size[a] and _free(b, mem, m_off[a], m_off[a] + m_num[a],
                                                         start, end, sh_ptr, sh_idx):
            return a
    for x in range((count - 1) // BLOCK, -1, -1):
        if not (_gap_over(gap, g_off[x], g_num[x], start[b], end[b])
                or _near(b, x, where, sh_ptr, sh_idx, rs_ptr, rs_idx)):
            continue
        for a in range(min(count, (x + 1) * BLOCK) - 1, x * BLOCK - 1, -1):
            if size[b] <= alloc_size[a] and _free(b, mem, m_off[a], m_off[a] + m_num[a],
                                                  start, end, sh_ptr, sh_idx):
                return a
    return -1


@njit(**JIT)
def assign(size, start, end, live_out, ranked, op_ptr, op_idx, sh_ptr, sh_idx):
    """XLA's value-to-allocation pass (SPEC section 3a, rule 2): where[b] is b's allocation
    (numbered as made), -1 for a value deferred to the heap. Each allocation keeps its values
    sorted by start, and each block of BLOCK allocations the gaps between them (steps free in
    one allocation), sorted by their start with a running max of their end: O(log v) to test an
    allocation or to rule out a block, plus the moves of the sorted inserts. The same `where` as
    the quadratic pass it replaced (tests/naive_allocation.py), value for value."""
    m = size.shape[0]
    where = np.full(m, -1, dtype=np.int64)
    alloc_size = np.zeros(m, dtype=np.int64)
    rs_ptr, rs_idx = _reverse(sh_ptr, sh_idx, m)
    mem = np.empty(4 * m + 4, dtype=np.int64)
    m_off, m_num, m_cap = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64)
    num_blocks = m // BLOCK + 1
    gap = np.empty(16 * m + 16, dtype=np.int64)
    g_off, g_num, g_cap = (np.zeros(num_blocks, np.int64), np.zeros(num_blocks, np.int64),
                           np.zeros(num_blocks, np.int64))
    mem_used, gap_used, count = 0, 0, 0
    vals, links = Values(size, start, end), Links(op_ptr, op_idx, sh_ptr, sh_idx, rs_ptr, rs_idx)
    for b in ranked:
        if live_out[b]:                    # a graph output: an allocation of its own
            a = count
            count += 1
            alloc_size[a] = size[b]
            gap, gap_used = _room(gap, gap_used, g_off, g_num, g_cap, a // BLOCK, 4)
            g_num[a // BLOCK] = _gap_add(gap, g_off[a // BLOCK], g_num[a // BLOCK], -1, _NEVER, a, 1)
        else:
            a = _choose(b, vals, links, where, alloc_size, count, mem, m_off, m_num, gap, g_off, g_num)
            if a < 0:
                continue
        where[b] = a
        mem, mem_used = _room(mem, mem_used, m_off, m_num, m_cap, a, 1)
        p = _insert(b, mem, m_off[a], m_num[a], start, end)
        m_num[a] += 1
        lo = end[mem[p - 1]] if p > m_off[a] else -1
        hi = start[mem[p + 1]] if p + 1 < m_off[a] + m_num[a] else _NEVER
        gap, gap_used = _split(gap, gap_used, g_off, g_num, g_cap, a, lo, hi, start[b], end[b])
    return where


@njit(**JIT)
def _insert(b, mem, o, n, start, end):
    """Puts b into mem[o:o + n] (sorted by (start, end)) in order; returns its index."""
    l, h = o, o + n
    while l < h:
        mid = (l + h) >> 1
        v = mem[mid]
        if start[v] < start[b] or (start[v] == start[b] and end[v] <= end[b]):
            l = mid + 1
        else:
            h = mid
    for i in range(o + n, l, -1):
        mem[i] = mem[i - 1]
    mem[l] = b
    return l


@njit(**JIT)
def best_fit(size, start, end, ranked):
    """Decreasing-size best fit over buffers in `ranked` order: each at the lowest offset of the
    smallest gap it fits among the placed buffers whose [start, end] overlaps its own, else
    above them all. Returns the heap size."""
    h = size.shape[0]
    off = np.zeros(h, dtype=np.int64)
    placed = np.empty(h, dtype=np.int64)
    cand_off = np.empty(h, dtype=np.int64)
    cand_end = np.empty(h, dtype=np.int64)
    top = 0
    for t in range(h):
        i = ranked[t]
        c = 0
        for q in range(t):
            j = placed[q]
            if start[j] <= end[i] and end[j] >= start[i]:
                cand_off[c] = off[j]
                cand_end[c] = off[j] + size[j]
                c += 1
        srt = np.argsort(cand_off[:c], kind="mergesort")
        cur = 0
        best = -1
        best_gap = 0
        for q in range(c):
            o = cand_off[srt[q]]
            if o > cur:
                gap = o - cur
                if gap >= size[i] and (best < 0 or gap < best_gap):
                    best = cur
                    best_gap = gap
            e = cand_end[srt[q]]
            if e > cur:
                cur = e
        if best < 0:
            best = cur
        off[i] = best
        placed[t] = i
        if best + size[i] > top:
            top = best + size[i]
    return top


# ---------------------------------------------------------------------------- driver
