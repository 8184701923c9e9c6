"""The naive twin of `regal.allocation._assign` (SPEC.md section 3a, rule 2): the quadratic pass
it replaced (issue 36), kept verbatim. Every value is tested against every allocation open at
its turn and every value already in it. Tests and benchmarks/bench_allocation.py compare the two
(same `where` array) and run `regal.allocation.allocation` with this one swapped in."""

import numpy as np
from numba import njit


@njit(cache=True)
def _shares(user, operand, sh_ptr, sh_idx):
    for j in range(sh_ptr[user], sh_ptr[user + 1]):
        if sh_idx[j] == operand:
            return True
    return False


@njit(cache=True)
def _interferes(a, b, start, end, sh_ptr, sh_idx):
    if end[a] < start[b] or end[b] < start[a]:
        return False
    if end[a] == start[b] and _shares(b, a, sh_ptr, sh_idx):
        return False
    if end[b] == start[a] and _shares(a, b, sh_ptr, sh_idx):
        return False
    return True


@njit(cache=True)
def _fits(alloc, b, size, start, end, alloc_size, head, nxt, sh_ptr, sh_idx):
    if size[b] > alloc_size[alloc]:
        return False
    a = head[alloc]
    while a >= 0:
        if _interferes(a, b, start, end, sh_ptr, sh_idx):
            return False
        a = nxt[a]
    return True


@njit(cache=True)
def assign(size, start, end, live_out, ranked, op_ptr, op_idx, sh_ptr, sh_idx):
    """where[b]: b's allocation (numbered in the order they are made), -1 deferred to the heap."""
    m = size.shape[0]
    where = np.full(m, -1, dtype=np.int64)
    alloc_size = np.zeros(m, dtype=np.int64)
    head = np.full(m, -1, dtype=np.int64)
    nxt = np.full(m, -1, dtype=np.int64)
    count = 0
    for b in ranked:
        if live_out[b]:
            alloc_size[count] = size[b]
            head[count] = b
            where[b] = count
            count += 1
            continue
        chosen = -1
        for j in range(op_ptr[b], op_ptr[b + 1]):
            alloc = where[op_idx[j]]
            if alloc >= 0 and _fits(alloc, b, size, start, end, alloc_size, head, nxt, sh_ptr, sh_idx):
                chosen = alloc
                break
        if chosen < 0:
            for alloc in range(count - 1, -1, -1):
                if _fits(alloc, b, size, start, end, alloc_size, head, nxt, sh_ptr, sh_idx):
                    chosen = alloc
                    break
        if chosen >= 0:
            where[b] = chosen
            nxt[b] = head[chosen]
            head[chosen] = b
    return where
