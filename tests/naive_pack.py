"""Static packing (regal.packing) the slow, obvious way: the naive twins of its kernels."""

import itertools


def first_fit(lower, upper, size, order):
    """Each buffer in `order` at the lowest offset where it overlaps no placed buffer that is
    live at the same time. Returns (offsets, arena)."""
    off = {}
    for i in order:
        taken = sorted((off[j], off[j] + size[j]) for j in off if lower[j] < upper[i] and lower[i] < upper[j])
        o = 0
        for a, b in taken:
            if a - o >= size[i]:
                break
            o = max(o, b)
        off[i] = o
    offsets = [off[i] for i in range(len(size))]
    return offsets, max((offsets[i] + size[i] for i in range(len(size))), default=0)


def optimal_arena(lower, upper, size):
    """The smallest arena of any packing: every packing is matched, byte for byte or lower, by
    first fit in the order of its offsets, so the best first fit over all orders is optimal."""
    live = [i for i in range(len(size)) if size[i] > 0 and upper[i] > lower[i]]
    return min((first_fit(lower, upper, size, p)[1] for p in itertools.permutations(live)), default=0)


def live_bytes(lower, upper, size):
    """The most bytes live at one time (every time a buffer starts)."""
    return max((sum(size[j] for j in range(len(size)) if lower[j] <= lower[i] < upper[j])
                for i in range(len(size)) if size[i] > 0 and upper[i] > lower[i]), default=0)


def collide(lower, upper, size, offsets):
    """The first pair of buffers live at one time whose byte ranges overlap, or None."""
    m = len(size)
    for i in range(m):
        for j in range(i + 1, m):
            if (size[i] and size[j] and lower[i] < upper[j] and lower[j] < upper[i]
                    and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]):
                return i, j
    return None
