"""The greedy placement-and-order kernel (`regal.heuristics.greedy_schedule`): list scheduling
over (ready node, device) pairs on a running memory state (SPEC.md section 3), steps
`_greedy_sources`, `_greedy_pick` and the run of the picked node, written in the step loop of
`greedy_schedule`; the graph as one struct, `g` (a `regal.kernels.structs.KernelGraph`); naive
twin in `tests/naive.py`."""

from typing import NamedTuple

import numba
import numpy as np

from regal._jit import JIT as _JIT
from regal._takeover import taken_over

_BIG = np.int64(2 ** 62)   # larger than any score


class GreedyGraph(NamedTuple):
    """The seven arrays of the `KernelGraph` the greedy's steps read. The steps are inlined, and
    Numba's inlining binds a struct argument anew, a reference count up and down per array: the
    whole graph struct (19 arrays) made the greedy 10 % slower (issue 57). Where LLVM cannot
    pair them again (a step with a call under a branch, as the run's `taken_over`), they stay in
    the step loop: the run is written in the loop itself (`greedy_schedule`)."""
    in_ptr: np.ndarray
    in_idx: np.ndarray
    nbytes: np.ndarray
    temp: np.ndarray
    resident: np.ndarray
    reuse_ptr: np.ndarray
    reuse_idx: np.ndarray


class GreedyState(NamedTuple):
    """The greedy's running state, one struct for its steps (made in `greedy_schedule`)."""
    placement: np.ndarray   # int32[n]     each node's device, -1 until placed
    present: np.ndarray     # bool[n * d]  a copy of node u on device k
    left: np.ndarray        # int64[n]     each node's unscheduled data consumers
    level: np.ndarray       # int64[d]     bytes beyond the device's resident base
    dynpeak: np.ndarray     # int64[d]     the highest level so far
    rbase: np.ndarray       # int64[d]     bytes of the resident tensors placed on the device
    cx: np.ndarray          # int64[n]     a ready node's unplaced resident inputs (homed where it runs)
    c2: np.ndarray          # int64[n * d] its copies + output + temp - taken over, on device k
    cb: np.ndarray          # int64[n * d] its copies + output - freed, on device k
    dirty: np.ndarray       # bool[n]      its terms are to be recomputed


@numba.njit(inline="always", **_JIT)
def _greedy_terms(g, v, d, has_reuse, placement, present, left, cx, c2, cb):
    """Node v's terms in the greedy's score on the running state: cx[v] the bytes of its unplaced
    resident inputs; for each device k, c2[v*d+k] its copies in + output + temp - what it takes
    over, cb[v*d+k] its copies in + output - what its run frees (on every device). g: the
    `GreedyGraph`."""
    in_ptr, in_idx, nbytes, temp, resident = g.in_ptr, g.in_idx, g.nbytes, g.temp, g.resident
    extra_r = np.int64(0)
    for e in range(in_ptr[v], in_ptr[v + 1]):
        if placement[in_idx[e]] < 0:
            extra_r += nbytes[in_idx[e]]
    cx[v] = extra_r
    for k in range(d):
        copy = np.int64(0)
        freed = np.int64(0)
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            h = placement[u]
            if h < 0:
                continue
            here = present[u * d + k]
            if not here:
                copy += nbytes[u]
            if left[u] == 1:
                cnt_dev = 0
                for j in range(d):
                    if present[u * d + j] or (j == k and not here):
                        if not (resident[u] and j == h):
                            cnt_dev += 1
                freed += nbytes[u] * cnt_dev
        taken = np.int64(0)
        if has_reuse:
            taken = taken_over(v, k, g.reuse_ptr, g.reuse_idx, nbytes, resident, placement, left)
        c2[v * d + k] = copy + nbytes[v] + temp[v] - taken
        cb[v * d + k] = copy + nbytes[v] - freed


@numba.njit(**_JIT)
def _greedy_sources(g, d, placement, present, rbase, indeg, order, ready):
    """The greedy's start: resident sources go first in the order (on one device, placed on 0
    at once; on several, placed where first read by a node run), the other sources and the
    nodes they release join `ready`. Returns (nodes ordered, nodes ready, peak)."""
    peak = np.int64(0)
    cnt = 0
    t = 0
    for v in range(g.num_nodes):
        if g.resident[v] and d == 1:
            placement[v] = 0
            present[v] = True
            rbase[0] += g.nbytes[v]
            peak = rbase[0]
        if indeg[v] == 0:
            if g.resident[v]:
                order[t] = v
                t += 1
            else:
                ready[cnt] = v
                cnt += 1
    for i in range(t):
        v = order[i]
        for e in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            w = g.succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[cnt] = w
                cnt += 1
    return t, cnt, peak


@numba.njit(inline="always", **_JIT)
def _greedy_pick(g, s, d, window, ready, cnt, has_reuse, peak):
    """The (ready index, device) to run next: among the last `window` ready nodes, each on its
    device of lowest (peak after, net bytes, memory while running, device), the node of lowest
    (peak after without the resident bytes it homes, net bytes, memory while running, index).
    g: the `GreedyGraph`; s: the `GreedyState`."""
    dirty, cx, c2, cb, rbase, level, dynpeak = s.dirty, s.cx, s.c2, s.cb, s.rbase, s.level, s.dynpeak
    placement, present, left = s.placement, s.present, s.left
    best = -1
    bk = 0
    s1 = _BIG
    s2 = _BIG
    s3 = _BIG
    for i in range(max(cnt - window, 0), cnt):
        v = ready[i]
        if dirty[v]:
            dirty[v] = False
            _greedy_terms(g, v, d, has_reuse, placement, present, left, cx, c2, cb)
        vk = -1
        f1 = _BIG
        f2 = _BIG
        f3 = _BIG
        extra_r = cx[v]
        for k in range(d):
            run = rbase[k] + extra_r + level[k] + c2[v * d + k]
            a = max(peak, rbase[k] + extra_r + dynpeak[k], run)
            b = cb[v * d + k]
            if vk < 0 or a < f1 or (a == f1 and (b < f2 or (b == f2 and run < f3))):
                vk, f1, f2, f3 = k, a, b, run
        # the node: the same key without the resident bytes it homes, a cost paid wherever
        # and whenever they are first read, so it steers the device but never delays a node
        run = f3 - extra_r
        a = max(peak, rbase[vk] + dynpeak[vk], run)
        if best < 0 or a < s1 or (a == s1 and (f2 < s2 or (f2 == s2 and (
                run < s3 or (run == s3 and v < ready[best]))))):
            best, bk, s1, s2, s3 = i, vk, a, f2, run
    return best, bk


@numba.njit(**_JIT)
def greedy_schedule(g, d, window, placement, order, stop):
    """Greedy list scheduling over (ready node, device) pairs (`regal.heuristics.greedy_schedule`).

    `ready` holds the ready nodes in the order they became ready; each step scores the last
    `window` of them (all, while there are no more), so a step costs O(window * d * in-degree).
    g: the `KernelGraph`. Writes placement: int32[n] in [0, d) and order: int32[n]; returns the
    number of nodes ordered, fewer than n when another thread set stop[0] (int64[2]; read before
    every step) to nonzero. stop[1]: the nodes ordered so far, written after every step (its
    progress, which `regal.heuristics._until` reads).
    """
    n = g.num_nodes
    in_ptr, in_idx, out_ptr, out_idx = g.in_ptr, g.in_idx, g.out_ptr, g.out_idx
    succ_ptr, succ_idx = g.succ_ptr, g.succ_idx
    nbytes, temp, resident, reuse_ptr, reuse_idx = g.nbytes, g.temp, g.resident, g.reuse_ptr, g.reuse_idx
    has_reuse = g.reuse_idx.shape[0] > 0
    present = np.zeros(n * d, dtype=np.bool_)
    left = np.empty(n, dtype=np.int64)  # unscheduled data consumers
    for u in range(n):
        left[u] = out_ptr[u + 1] - out_ptr[u]
        placement[u] = -1
    level = np.zeros(d, dtype=np.int64)     # bytes beyond the device's resident base
    dynpeak = np.zeros(d, dtype=np.int64)   # highest level so far
    rbase = np.zeros(d, dtype=np.int64)     # bytes of resident tensors placed on the device
    indeg = g.pred_cnt.copy()
    ready = np.empty(n, dtype=np.int32)
    t, cnt, peak = _greedy_sources(g, d, placement, present, rbase, indeg, order, ready)
    # each ready node's per-device terms, which change only when one of its inputs is placed,
    # copied, freed or loses a consumer: recomputed then (`dirty`), not at every step
    cx = np.zeros(n, dtype=np.int64)        # unplaced resident inputs (homed where v runs)
    c2 = np.zeros(n * d, dtype=np.int64)    # copies + output + temp - taken over, on device k
    cb = np.zeros(n * d, dtype=np.int64)    # copies + output - freed, on device k
    dirty = np.ones(n, dtype=np.bool_)
    s = GreedyState(placement, present, left, level, dynpeak, rbase, cx, c2, cb, dirty)
    gg = GreedyGraph(in_ptr, in_idx, nbytes, temp, resident, reuse_ptr, reuse_idx)
    while cnt > 0:
        if stop[0] != 0:
            return t
        best, k = _greedy_pick(gg, s, d, window, ready, cnt, has_reuse, peak)
        v = ready[best]
        cnt -= 1
        for i in range(best, cnt):  # keep the order in which they became ready
            ready[i] = ready[i + 1]
        # run v on device k: its unplaced resident inputs are homed on k, the others copied in;
        # the level rises by its output and temp (less what it takes over) while it runs; the
        # inputs it read last are freed on every device. Written here, not as an inlined step:
        # a step taking the graph's struct left 12 reference counts a step in this loop (the
        # greedy 3-4 % slower than with its arrays, 10-15 % slower than without; issue 57)
        taken = np.int64(0)
        if has_reuse:
            taken = taken_over(v, k, reuse_ptr, reuse_idx, nbytes, resident, placement, left)
        placement[v] = k
        present[v * d + k] = True
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if placement[u] < 0:
                placement[u] = k
                present[u * d + k] = True
                rbase[k] += nbytes[u]
            elif not present[u * d + k]:
                present[u * d + k] = True
                level[k] += nbytes[u]
        level[k] += nbytes[v] + temp[v] - taken
        if level[k] > dynpeak[k]:
            dynpeak[k] = level[k]
        level[k] += taken - temp[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            left[u] -= 1
            if left[u] == 0:
                for j in range(d):
                    if present[u * d + j] and not (resident[u] and j == placement[u]):
                        present[u * d + j] = False
                        level[j] -= nbytes[u]
        order[t] = v
        t += 1
        stop[1] = t
        if rbase[k] + dynpeak[k] > peak:
            peak = rbase[k] + dynpeak[k]
        for e in range(in_ptr[v], in_ptr[v + 1]):  # v's inputs changed: their readers' terms did
            u = in_idx[e]
            for f in range(out_ptr[u], out_ptr[u + 1]):
                dirty[out_idx[f]] = True
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[cnt] = w
                cnt += 1
    for v in range(n):  # resident tensors nobody reads: the device with the lowest peak
        if placement[v] < 0:
            k = 0
            for j in range(1, d):
                if rbase[j] + dynpeak[j] < rbase[k] + dynpeak[k]:
                    k = j
            placement[v] = k
            rbase[k] += nbytes[v]
    return t
