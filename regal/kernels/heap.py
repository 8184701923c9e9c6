"""The binary max-heap the list schedulers share (decoder, timed simulator): one copy; and the
sorted array the decoder's ready set starts as.

Keys and nodes live in two arrays, the heap at [base, base + size); the top is the largest key,
ties to the lower node index (SPEC.md section 5: the ready node of highest priority, ties to
the lower index). Several heaps can share one pair of arrays at different bases. A small ready
set is cheaper as a sorted array with its top at the end (`sorted_push` shifts a few entries; a
pop is a decrement instead of a sift through about log2(size) levels, each a comparison of
random keys that the branch predictor misses half the time); `sorted_to_heap` turns one into a
heap when it grows.
"""

import numba

from regal._jit import JIT, UINDEX as _U


@numba.njit(inline="always", **JIT)
def heap_push(hkey, hnode, base, size, key, node):
    """Push (key, node) on the max-heap stored at hkey/hnode[base:]; returns the new size."""
    b = _U(base)
    i = _U(size)
    while i > 0:
        parent = (i - _U(1)) >> _U(1)
        kp = hkey[b + parent]
        if key > kp or (key == kp and node < hnode[b + parent]):
            hkey[b + i] = kp
            hnode[b + i] = hnode[b + parent]
            i = parent
        else:
            break
    hkey[b + i] = key
    hnode[b + i] = node
    return size + 1


@numba.njit(inline="always", **JIT)
def heap_pop(hkey, hnode, base, size):
    """Remove the top of the heap at hkey/hnode[base:]; returns (node, new size)."""
    b = _U(base)
    top = hnode[b]
    size -= 1
    n = _U(size)
    key = hkey[b + n]
    node = hnode[b + n]
    i = _U(0)
    while True:
        c = _U(2) * i + _U(1)
        if c >= n:
            break
        if c + _U(1) < n:
            k1 = hkey[b + c + _U(1)]
            k0 = hkey[b + c]
            if k1 > k0 or (k1 == k0 and hnode[b + c + _U(1)] < hnode[b + c]):
                c += _U(1)
        kc = hkey[b + c]
        if kc > key or (kc == key and hnode[b + c] < node):
            hkey[b + i] = kc
            hnode[b + i] = hnode[b + c]
            i = c
        else:
            break
    hkey[b + i] = key
    hnode[b + i] = node
    return top, size


@numba.njit(inline="always", **JIT)
def sorted_push(hkey, hnode, size, key, node):
    """Insert (key, node) into hkey/hnode[:size], kept sorted with the top at the end (the last
    entry has the largest key, ties to the lower node); returns the new size."""
    i = _U(size)
    while i > 0:
        kp = hkey[i - _U(1)]
        if key < kp or (key == kp and node > hnode[i - _U(1)]):
            hkey[i] = kp
            hnode[i] = hnode[i - _U(1)]
            i -= _U(1)
        else:
            break
    hkey[i] = key
    hnode[i] = node
    return size + 1


@numba.njit(**JIT)
def sorted_to_heap(hkey, hnode, size):
    """Reverse hkey/hnode[:size]: a sorted array with its top at the end becomes a max-heap at
    base 0 (each entry is at least its children, which come after it)."""
    for i in range(size // 2):
        j = size - 1 - i
        hkey[i], hkey[j] = hkey[j], hkey[i]
        hnode[i], hnode[j] = hnode[j], hnode[i]
