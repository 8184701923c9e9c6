"""Numba kernels of the list schedulers of `regal.timed_heuristics`: HEFT's processor selection
with insertion (Topcuoglu, Hariri and Wu, IEEE TPDS 2002) and the bottom levels of the
critical-path list scheduler.

Structs in, arrays out, as in `regal.kernels.timed`: the graph is `regal.kernels.structs.KernelGraph`
(`g`), the devices `regal.kernels.timed.TimedDevices` (`dev`).
"""

import numba
import numpy as np

from regal._jit import JIT as _JIT

#: HEFT's steps for every (node, device) are compiled into it (`forceinline`) and count no
#: references (they allocate nothing): a call, or the counting of every array of the graph
#: struct a step is handed, would cost more than the step.
_STEP = dict(_nrt=False, forceinline=True, **_JIT)


@numba.njit(**_JIT)
def bottom_levels(topo, g, work, comm, placement, level):
    """level[v] = work[v] + max over successors w of (edge + level[w]), edge = comm[v] for a data
    edge that crosses devices (placement[v] != placement[w]; with placement all -1, every data
    edge), else 0. topo: int32[n] topological; work, comm: float64[n]; writes level: float64[n]."""
    n = topo.shape[0]
    is_data = np.zeros(n, dtype=np.bool_)
    for t in range(n - 1, -1, -1):
        v = topo[t]
        for e in range(g.out_ptr[v], g.out_ptr[v + 1]):
            is_data[g.out_idx[e]] = True
        best = 0.0
        for e in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
            w = g.succ_idx[e]
            x = level[w]
            if is_data[w] and (placement[v] < 0 or placement[v] != placement[w]):
                x += comm[v]
            if x > best:
                best = x
        for e in range(g.out_ptr[v], g.out_ptr[v + 1]):
            is_data[g.out_idx[e]] = False
        level[v] = work[v] + best


@numba.njit(**_JIT)
def heft_schedule(order, g, dev, kept, cap, placement, ast):
    """HEFT's processor-selection phase with insertion: each node of `order` (int32[*], the
    non-resident nodes by decreasing upward rank) goes to the device where it finishes earliest,
    into the earliest idle gap of that device that fits it after its inputs can be there.

    A data input on another device is there `latency + bytes / bandwidth` after it finished
    (HEFT's model: no link contention); a control input when it finished. A resident input not
    yet placed is there at time 0 and is placed with its first consumer; resident nodes nobody
    reads go to the device with the fewest resident bytes. Writes placement: int32[n] and
    ast: float64[n] (start times; resident nodes 0). Ties go to the lower device.

    Memory booking (`cap`: int64[d] bytes per device; a cap no booking reaches is plain HEFT):
    in `order`, each device books the resident nodes placed on it for good, every output placed
    on it and every copy of a data input sent to it, and releases an output and its copies when
    the last of its consumers is placed, unless it is `kept` (bool[n]: resident, graph output or
    never read). A device whose booking with `v` would exceed its cap is passed over for `v`;
    when every device would, `v` goes where the excess is smallest (ties: earliest finish).
    """
    n, d = g.num_nodes, dev.speed.shape[0]
    aft = np.zeros(n, dtype=np.float64)
    for v in range(n):
        placement[v] = -1
        ast[v] = 0.0
    s_start = np.empty((d, order.shape[0] + 1), dtype=np.float64)  # busy intervals per device,
    s_end = np.empty((d, order.shape[0] + 1), dtype=np.float64)    # sorted by start
    cnt = np.zeros(d, dtype=np.int64)
    is_data = np.zeros(n, dtype=np.bool_)
    booked = np.zeros(d, dtype=np.int64)
    copied = np.zeros((n, d), dtype=np.bool_)
    left = np.empty(n, dtype=np.int64)  # consumers not yet placed
    for u in range(n):
        left[u] = g.out_ptr[u + 1] - g.out_ptr[u]
    for t in range(order.shape[0]):
        v = order[t]
        for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
            is_data[g.in_idx[e]] = True
        best_k = 0
        best_s = 0.0
        best_f = np.inf
        best_pos = 0
        best_over = np.int64(1) << 62
        for k in range(d):
            need = booked[k] + (0 if g.resident[v] else g.nbytes[v])
            for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
                u = g.in_idx[e]
                if placement[u] < 0 or (placement[u] != k and not copied[u, k]):
                    need += g.nbytes[u]  # repeated inputs count once more each: a bound
            over = max(need - cap[k], np.int64(0))
            if over > best_over:
                continue
            ready = 0.0  # every predecessor finished and every data input on k
            for e in range(g.pred_ptr[v], g.pred_ptr[v + 1]):
                u = g.pred_idx[e]
                r = aft[u]
                if is_data[u] and placement[u] >= 0 and placement[u] != k:
                    r += dev.latency + g.nbytes[u] / dev.bandwidth
                if r > ready:
                    ready = r
            dur = g.cost[v] / dev.speed[k]
            s, pos = _earliest_gap(s_start, s_end, k, cnt[k], ready, dur)
            f = s + dur
            if over < best_over or f < best_f:
                best_f, best_s, best_k, best_pos, best_over = f, s, k, pos, over
        k = best_k
        _book(v, k, g, booked, copied, left, is_data, placement, kept)
        for i in range(cnt[k], best_pos, -1):
            s_start[k, i] = s_start[k, i - 1]
            s_end[k, i] = s_end[k, i - 1]
        s_start[k, best_pos] = best_s
        s_end[k, best_pos] = best_f
        cnt[k] += 1
        placement[v] = k
        ast[v] = best_s
        aft[v] = best_f
    _place_unread_residents(g, d, placement)


@numba.njit(**_STEP)
def _earliest_gap(s_start, s_end, k, cnt, ready, dur):
    """(start, position) of the earliest idle gap, among device k's cnt busy intervals (sorted,
    s_start/s_end[k, :cnt]), that fits a task of length dur from `ready` on (position cnt: after
    the last)."""
    # intervals do not overlap, so their ends are sorted too; skip (binary search) those that end
    # by `ready`, then walk the gaps
    lo = 0
    hi = cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if s_end[k, mid] <= ready:
            lo = mid + 1
        else:
            hi = mid
    prev_end = s_end[k, lo - 1] if lo > 0 else 0.0
    pos = cnt
    for i in range(lo, cnt):
        st = max(ready, prev_end)
        if st + dur <= s_start[k, i]:
            pos = i
            break
        prev_end = s_end[k, i]
    return max(ready, prev_end), pos


@numba.njit(**_STEP)
def _book(v, k, g, booked, copied, left, is_data, placement, kept):
    """Book v on device k: its output, its unplaced resident inputs (placed with it) and the
    copies of its remote inputs; release the inputs it was the last to read, unless kept."""
    if not g.resident[v]:
        booked[k] += g.nbytes[v]
    for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
        u = g.in_idx[e]
        is_data[u] = False
        if placement[u] < 0:  # an unplaced resident input goes with its first consumer
            placement[u] = k
            booked[k] += g.nbytes[u]
        elif placement[u] != k and not copied[u, k]:
            copied[u, k] = True
            booked[k] += g.nbytes[u]
    for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
        u = g.in_idx[e]
        left[u] -= 1
        if left[u] == 0 and not kept[u]:
            booked[placement[u]] -= g.nbytes[u]
            for q in range(copied.shape[1]):
                if copied[u, q]:
                    booked[q] -= g.nbytes[u]


@numba.njit(**_JIT)
def _place_unread_residents(g, d, placement):
    """Resident nodes nobody placed go, one by one, to the device with the fewest resident bytes."""
    rbytes = np.zeros(d, dtype=np.int64)
    for u in range(g.num_nodes):
        if g.resident[u] and placement[u] >= 0:
            rbytes[placement[u]] += g.nbytes[u]
    for u in range(g.num_nodes):
        if placement[u] < 0:
            k = 0
            for j in range(1, d):
                if rbytes[j] < rbytes[k]:
                    k = j
            placement[u] = k
            rbytes[k] += g.nbytes[u]
