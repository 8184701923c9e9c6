"""The Numba kernels of `regal.packing`'s fast heuristic: overlaps, greedy placement, and each
buffer's busiest section. The exact search is `regal.kernels.minimalloc`.

Arrays and scalars in, arrays out; `regal.packing` validates first. A buffer i has a half-open
life [lower[i], upper[i]) (int64) and a size (int64 > 0), every value at most `MAX_VALUE`. Two
buffers *overlap* when their lives intersect; a packing gives each an offset so that no two
overlapping buffers share a byte.

`stop` (int64[1]) is how a caller cuts a kernel short: the kernels read `stop[0]` every
`POLL` steps and return what they have once it is non-zero (`regal.packing` sets it from
another thread when its deadline passes: a time limit or a signal).
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT

#: Sizes, offsets and lives are exact up to this (2**62): the sum of two of them fits in int64.
MAX_VALUE = 1 << 62
#: Steps between two reads of the `stop` flag (a power of two, less one: a mask).
POLL = 1023


@numba.njit(**_JIT)
def overlaps(lower, upper, stop):
    """The overlap graph as CSR (ptr: int64[m+1], idx: int64[*]), each pair listed both ways;
    ptr[m] = -1 when `stop` cut it short. O(m log m + pairs): buffers by start, each against the
    later-starting ones it reaches."""
    m = lower.shape[0]
    order = np.argsort(lower, kind="mergesort")
    deg = np.zeros(m, dtype=np.int64)
    for a in range(m):
        if (a & POLL) == 0 and stop[0] != 0:
            ptr = np.zeros(m + 1, dtype=np.int64)
            ptr[m] = -1
            return ptr, np.empty(0, dtype=np.int64)
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
def greedy(size, ptr, idx, order, best_fit, stop):
    """Place the buffers in `order`, each at the lowest offset (best_fit: in the smallest gap)
    where it overlaps no placed neighbour, else just above them. Returns (offsets, arena,
    placed): the first `placed` buffers of `order` are placed (all of them unless `stop` cut it
    short; the others' offsets are -1); arena -1 when a buffer would end above MAX_VALUE."""
    m = size.shape[0]
    off = np.full(m, -1, dtype=np.int64)
    lo = np.empty(m, dtype=np.int64)
    hi = np.empty(m, dtype=np.int64)
    arena = 0
    for t in range(m):
        if (t & POLL) == 0 and stop[0] != 0:
            return off, arena, t
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
        if best > MAX_VALUE - size[i]:
            return off, -1, t
        off[i] = best
        if best + size[i] > arena:
            arena = best + size[i]
    return off, arena, m


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
