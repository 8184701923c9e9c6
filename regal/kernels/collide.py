"""`regal.packing.check`'s kernel: the first two buffers of a packing that are live at the same
time and share a byte, by a sweep over time. It shares no code with the packer (`pack`,
`minimalloc`): a checker beside the solver, as MiniMalloc keeps its validator.

Buffers come in as int64 arrays (lower, upper, offset, size), each live in [lower, upper) with
size > 0 and every value at most 2**62 (the caller checks). The live buffers, kept sorted by
(offset, index), never share a byte until the first collision; so a buffer that starts collides
with one of them exactly when it collides with its neighbour below or above in that order. O(m
log m) for the events, O(live) per insertion and removal.
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT


@numba.njit(**_JIT)
def _less(off, a, b):
    """Whether buffer a comes before buffer b by (offset, index)."""
    return off[a] < off[b] or (off[a] == off[b] and a < b)


@numba.njit(**_JIT)
def _position(off, act, k, b):
    """The first position in act[:k] (sorted by (offset, index)) not before buffer b."""
    lo, hi = 0, k
    while lo < hi:
        mid = (lo + hi) // 2
        if _less(off, act[mid], b):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(**_JIT)
def first_collision(lower, upper, off, size):
    """(i, j): two buffers live at the same time that share a byte (j starts no later than i),
    or (-1, -1) when the packing is valid."""
    m = lower.shape[0]
    # events: e < m ends buffer e, e >= m starts buffer e - m; a stable sort keeps ends before
    # starts at the same time (lives are half-open)
    times = np.empty(2 * m, dtype=np.int64)
    times[:m] = upper
    times[m:] = lower
    ev = np.argsort(times, kind="mergesort")
    act = np.empty(m, dtype=np.int64)
    k = 0
    for e in ev:
        i = e - m if e >= m else e
        if e < m:  # i ends
            p = _position(off, act, k, i)
            for q in range(p, k - 1):
                act[q] = act[q + 1]
            k -= 1
            continue
        p = _position(off, act, k, i)
        if p > 0:
            below = act[p - 1]
            if off[below] + size[below] > off[i]:
                return i, below
        if p < k:
            above = act[p]
            if off[i] + size[i] > off[above]:
                return i, above
        for q in range(k, p, -1):
            act[q] = act[q - 1]
        act[p] = i
        k += 1
    return -1, -1
