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

from regal._jit import JIT


@numba.njit(inline="always", **JIT)
def heap_push(hkey, hnode, base, size, key, node):
    """Push (key, node) on the max-heap stored at hkey/hnode[base:]; returns the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        kp = hkey[base + parent]
        if key > kp or (key == kp and node < hnode[base + parent]):
            hkey[base + i] = kp
            hnode[base + i] = hnode[base + parent]
            i = parent
        else:
            break
    hkey[base + i] = key
    hnode[base + i] = node
    return size + 1


@numba.njit(inline="always", **JIT)
def heap_pop(hkey, hnode, base, size):
    """Remove the top of the heap at hkey/hnode[base:]; returns (node, new size)."""
    top = hnode[base]
    size -= 1
    key = hkey[base + size]
    node = hnode[base + size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size:
            k1 = hkey[base + c + 1]
            k0 = hkey[base + c]
            if k1 > k0 or (k1 == k0 and hnode[base + c + 1] < hnode[base + c]):
                c += 1
        kc = hkey[base + c]
        if kc > key or (kc == key and hnode[base + c] < node):
            hkey[base + i] = kc
            hnode[base + i] = hnode[base + c]
            i = c
        else:
            break
    hkey[base + i] = key
    hnode[base + i] = node
    return top, size


@numba.njit(inline="always", **JIT)
def sorted_push(hkey, hnode, size, key, node):
    """Insert (key, node) into hkey/hnode[:size], kept sorted with the top at the end (the last
    entry has the largest key, ties to the lower node); returns the new size."""
    i = size
    while i > 0:
        kp = hkey[i - 1]
        if key < kp or (key == kp and node > hnode[i - 1]):
            hkey[i] = kp
            hnode[i] = hnode[i - 1]
            i -= 1
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
