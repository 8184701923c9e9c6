"""Numba kernels of the timed model (SPEC.md section 4, settled in docs/timed-model.md): an
event-driven simulation of a placement and scheduling priorities that returns the makespan and
every device's peak memory, its decoder from the timed chromosome (section 5), the batched
population evaluation, and HEFT's insertion scheduler (`regal.timed_heuristics`).

Arrays and scalars in, arrays out, as in `regal._kernels` (same JIT options); the public wrappers
in `regal.timed` validate first. The naive twin of `simulate_timed` is `tests/naive_timed.py`.

Graph arrays (n nodes, d devices) as in `regal._kernels`, plus output: bool[n] (graph outputs,
field `output`: their home copy is never freed) and cost: float64[n] seconds on the nominal
device. Device model: speed: float64[d] (a node runs cost / speed[k] seconds on device k),
bandwidth (bytes/s) and latency (s) of every directed link p -> q, p != q.
"""

import numba
import numpy as np

from regal._heap import heap_pop as _pop, heap_push as _push
from regal._jit import JIT as _JIT, PARALLEL_JIT


@numba.njit(**_JIT)
def _epush(etime, eslot, size, time, slot):
    """Push (time, slot) on the min-heap of running tasks; ties go to the lower slot."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        tp = etime[parent]
        if time < tp or (time == tp and slot < eslot[parent]):
            etime[i] = tp
            eslot[i] = eslot[parent]
            i = parent
        else:
            break
    etime[i] = time
    eslot[i] = slot
    return size + 1


@numba.njit(**_JIT)
def _epop(etime, eslot, size):
    """Remove the earliest running task; returns (slot, new size)."""
    top = eslot[0]
    size -= 1
    time = etime[size]
    slot = eslot[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size:
            t1 = etime[c + 1]
            t0 = etime[c]
            if t1 < t0 or (t1 == t0 and eslot[c + 1] < eslot[c]):
                c += 1
        tc = etime[c]
        if tc < time or (tc == time and eslot[c] < slot):
            etime[i] = tc
            eslot[i] = eslot[c]
            i = c
        else:
            break
    etime[i] = time
    eslot[i] = slot
    return top, size


@numba.njit(**_JIT)
def simulate_timed(placement, prio, tprio, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx,
                   out_ptr, out_idx, nbytes, temp, resident, output, reuse_ptr, reuse_idx, cost, speed,
                   bandwidth, latency, device_peak, start, finish, seq, tr_start, tr_seq, trace_t, trace_m):
    """Makespan (s) of running the placement with these priorities (SPEC.md section 4).

    placement: int32[n]; prio: float64[n], scheduling priority (higher runs first among a
    device's ready nodes, ties to the lower index); tprio: float64[n, d], tprio[u, q] the
    priority of the transfer of u to device q on its link (higher first, ties to the lower u).
    Writes device_peak: int64[d] (bytes, over time). When start has n entries (else 0) it also
    writes start, finish: float64[n] (resident nodes: 0), seq: int32[n] and, for every
    transfer (u, q), tr_start[u*d + q]: float64[n*d] and tr_seq[u*d + q]: int32[n*d] (untouched
    where there is none). seq and tr_seq number the starts in the order they happen (resident
    nodes first, by index): sorting by them gives the dispatch order, even among tasks of zero
    length that start at the same instant. When trace_t has entries (n*d + 1 suffice; else 0),
    trace_t: float64[*] and trace_m: int64[*, d] receive, after every instant's starts, the time
    and every device's bytes (memory is constant from there to the next instant, and that row is
    the instant's highest); rows past the last instant are untouched.

    Each instant t: every task (node run or transfer) finishing at t is retired first (temp,
    inputs and home copies freed, successors made ready, transfers queued), then every idle
    device starts its best ready node and every idle link its best queued transfer. Memory
    only falls while retiring and only rises while starting, so the order inside either phase
    changes nothing. Tasks of zero length finish at the same t and are retired in a next round.
    A graph output (`output`) keeps its home copy to the end, as a resident node does; its copies
    on other devices go after their last consumer there.

    Taking over (`reuse`, SPEC.md section 3): node v starting on k takes over, in preference
    order while the total stays <= bytes(v), each input homed on k, neither resident nor an
    output, of which v is the last unfinished home consumer and whose transfers have all arrived
    (the step frees its home copy); v then holds that many bytes fewer while it runs, and after
    it the bytes are as without the field.
    """
    record = start.shape[0] > 0
    tracing = trace_t.shape[0] > 0
    ntr = 0
    has_reuse = reuse_idx.shape[0] > 0
    taken = np.zeros(n if has_reuse else 0, dtype=np.int64)
    dd = d * d
    # consumers of u on each device; a node waits for its predecessors to finish and for each
    # remote data input to arrive; transfers of u; capacity of each device's and link's queue
    cons = np.zeros(n * d, dtype=np.int32)
    wait = np.empty(n, dtype=np.int32)
    for v in range(n):
        k = placement[v]
        w = pred_cnt[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            cons[u * d + k] += 1
            w += placement[u] != k
        wait[v] = w
    tr_left = np.zeros(n, dtype=np.int32)
    dcap = np.zeros(d, dtype=np.int64)
    lcap = np.zeros(dd, dtype=np.int64)
    for u in range(n):
        h = placement[u]
        dcap[h] += not resident[u]
        if d > 1:
            for q in range(d):
                if q != h and cons[u * d + q] > 0:
                    tr_left[u] += 1
                    lcap[h * d + q] += 1
    dbase = np.empty(d, dtype=np.int64)
    acc = 0
    for k in range(d):
        dbase[k] = acc
        acc += dcap[k]
    rkey = np.empty(max(acc, 1), dtype=np.float64)
    rnode = np.empty(max(acc, 1), dtype=np.int32)
    lbase = np.empty(dd, dtype=np.int64)
    acc = 0
    for l in range(dd):
        lbase[l] = acc
        acc += lcap[l]
    pkey = np.empty(max(acc, 1), dtype=np.float64)
    pnode = np.empty(max(acc, 1), dtype=np.int32)
    dsize = np.zeros(d, dtype=np.int64)
    lsize = np.zeros(dd, dtype=np.int64)
    mem = np.zeros(d, dtype=np.int64)
    home_freed = np.zeros(n, dtype=np.bool_)
    dev_node = np.full(d, -1, dtype=np.int32)
    link_node = np.full(dd, -1, dtype=np.int32)
    etime = np.empty(d + dd, dtype=np.float64)  # running tasks by finish time: device k is slot
    eslot = np.empty(d + dd, dtype=np.int32)    # k, link l slot d + l (one task each at a time)
    esize = 0
    dcand = np.empty(d, dtype=np.int32)  # devices and links that may start a task at this instant
    dflag = np.zeros(d, dtype=np.bool_)
    ndc = 0
    lcand = np.empty(dd, dtype=np.int32)
    lflag = np.zeros(dd, dtype=np.bool_)
    nlc = 0
    nseq = 0
    t = 0.0
    makespan = 0.0

    for u in range(n):
        if resident[u]:
            mem[placement[u]] += nbytes[u]
    for k in range(d):
        device_peak[k] = mem[k]
        dflag[k] = True  # every device looks at its queue at time 0
        dcand[k] = k
    ndc = d
    for u in range(n):
        if resident[u]:  # present at time 0: successors and transfers as if it finished then
            if record:
                start[u] = 0.0
                finish[u] = 0.0
                seq[u] = nseq
                nseq += 1
            for e in range(succ_ptr[u], succ_ptr[u + 1]):
                w = succ_idx[e]
                wait[w] -= 1
                if wait[w] == 0:
                    k = placement[w]
                    dsize[k] = _push(rkey, rnode, dbase[k], dsize[k], prio[w], w)
            if tr_left[u] > 0:
                h = placement[u]
                for q in range(d):
                    if q != h and cons[u * d + q] > 0:
                        l = h * d + q
                        lsize[l] = _push(pkey, pnode, lbase[l], lsize[l], tprio[u, q], u)
                        if not lflag[l]:
                            lflag[l] = True
                            lcand[nlc] = l
                            nlc += 1
        elif pred_cnt[u] == 0:
            k = placement[u]
            dsize[k] = _push(rkey, rnode, dbase[k], dsize[k], prio[u], u)

    while True:
        # start: every idle device its best ready node, every idle link its best transfer
        for i in range(ndc):
            k = dcand[i]
            dflag[k] = False
            if dev_node[k] < 0 and dsize[k] > 0:
                v, dsize[k] = _pop(rkey, rnode, dbase[k], dsize[k])
                dev_node[k] = v
                tk = 0
                if has_reuse:
                    for e in range(reuse_ptr[v], reuse_ptr[v + 1]):
                        u = reuse_idx[e]
                        if (placement[u] == k and not resident[u] and not output[u] and cons[u * d + k] == 1
                                and tr_left[u] == 0 and tk + nbytes[u] <= nbytes[v]):
                            tk += nbytes[u]
                    taken[v] = tk
                m = mem[k] + nbytes[v] + temp[v] - tk
                mem[k] = m
                if m > device_peak[k]:
                    device_peak[k] = m
                esize = _epush(etime, eslot, esize, t + cost[v] / speed[k], k)
                if record:
                    start[v] = t
                    seq[v] = nseq
                    nseq += 1
        ndc = 0
        for i in range(nlc):
            l = lcand[i]
            lflag[l] = False
            if link_node[l] < 0 and lsize[l] > 0:
                u, lsize[l] = _pop(pkey, pnode, lbase[l], lsize[l])
                q = l % d
                link_node[l] = u
                m = mem[q] + nbytes[u]  # the copy occupies memory from the transfer's start
                mem[q] = m
                if m > device_peak[q]:
                    device_peak[q] = m
                esize = _epush(etime, eslot, esize, t + (latency + nbytes[u] / bandwidth), d + l)
                if record:
                    tr_start[u * d + q] = t
                    tr_seq[u * d + q] = nseq
                    nseq += 1
        nlc = 0
        if tracing:
            trace_t[ntr] = t
            for k in range(d):
                trace_m[ntr, k] = mem[k]
            ntr += 1
        if esize == 0:
            break
        # advance to the next finish and retire everything that ends then
        t = etime[0]
        while esize > 0 and etime[0] == t:
            s, esize = _epop(etime, eslot, esize)
            if s < d:  # node v finished on device k
                k = s
                v = dev_node[k]
                dev_node[k] = -1
                if not dflag[k]:
                    dflag[k] = True
                    dcand[ndc] = k
                    ndc += 1
                mem[k] -= temp[v]
                if has_reuse:
                    mem[k] += taken[v]
                if t > makespan:
                    makespan = t
                if record:
                    finish[v] = t
                for e in range(succ_ptr[v], succ_ptr[v + 1]):
                    w = succ_idx[e]
                    wait[w] -= 1
                    if wait[w] == 0:
                        kw = placement[w]
                        dsize[kw] = _push(rkey, rnode, dbase[kw], dsize[kw], prio[w], w)
                        if not dflag[kw]:
                            dflag[kw] = True
                            dcand[ndc] = kw
                            ndc += 1
                for e in range(in_ptr[v], in_ptr[v + 1]):
                    u = in_idx[e]
                    h = placement[u]
                    c = cons[u * d + k] - 1
                    cons[u * d + k] = c
                    if c == 0:
                        if h != k:  # the copy on k after its last consumer there
                            mem[k] -= nbytes[u]
                        elif tr_left[u] == 0 and not resident[u] and not output[u] and not home_freed[u]:
                            home_freed[u] = True  # the home copy: home consumers done, copies sent
                            mem[h] -= nbytes[u]
                if tr_left[v] > 0:
                    for q in range(d):
                        if q != k and cons[v * d + q] > 0:
                            l = k * d + q
                            lsize[l] = _push(pkey, pnode, lbase[l], lsize[l], tprio[v, q], v)
                            if not lflag[l]:
                                lflag[l] = True
                                lcand[nlc] = l
                                nlc += 1
            else:  # the transfer of u to device q arrived
                l = s - d
                u = link_node[l]
                link_node[l] = -1
                q = l % d
                h = l // d
                if not lflag[l]:
                    lflag[l] = True
                    lcand[nlc] = l
                    nlc += 1
                tr_left[u] -= 1
                for e in range(out_ptr[u], out_ptr[u + 1]):
                    w = out_idx[e]
                    if placement[w] == q:
                        wait[w] -= 1
                        if wait[w] == 0:
                            dsize[q] = _push(rkey, rnode, dbase[q], dsize[q], prio[w], w)
                            if not dflag[q]:
                                dflag[q] = True
                                dcand[ndc] = q
                                ndc += 1
                if (tr_left[u] == 0 and cons[u * d + h] == 0 and not resident[u] and not output[u]
                        and not home_freed[u]):
                    home_freed[u] = True
                    mem[h] -= nbytes[u]
    return makespan


@numba.njit(**_JIT)
def decode_timed(keys, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx, nbytes,
                 temp, resident, output, reuse_ptr, reuse_idx, cost, speed, bandwidth, latency, placement,
                 device_peak, start, finish, seq, tr_start, tr_seq, trace_t, trace_m):
    """Decode one timed chromosome (SPEC.md section 5) and return its makespan (section 4).

    keys: float64[n*(2d+1)], node v's row keys[v*(2d+1) : (v+1)*(2d+1)] holds its d device
    affinities (placement = argmax, ties to the lower device), its scheduling priority, then the
    priorities of the transfers of its output to devices 0..d-1. Writes placement int32[n] and
    what `simulate_timed` writes.
    """
    w = 2 * d + 1
    rows = keys.reshape((n, w))
    for v in range(n):
        best = 0
        bk = rows[v, 0]
        for j in range(1, d):
            if rows[v, j] > bk:
                bk = rows[v, j]
                best = j
        placement[v] = best
    prio = rows[:, d]
    tprio = rows[:, d + 1:]
    return simulate_timed(placement, prio, tprio, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx,
                          out_ptr, out_idx, nbytes, temp, resident, output, reuse_ptr, reuse_idx, cost, speed,
                          bandwidth, latency, device_peak, start, finish, seq, tr_start, tr_seq, trace_t,
                          trace_m)


@numba.njit(**PARALLEL_JIT)
def evaluate_population_timed(population, n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr,
                              out_idx, nbytes, temp, resident, output, reuse_ptr, reuse_idx, cost, speed, bandwidth,
                              latency, limit, makespan, excess):
    """Decode and simulate every chromosome of population float64[m, n*(2d+1)] in parallel.

    limit: int64[d] bytes per device (negative: none). Writes makespan: float64[m] seconds and
    excess: int64[m], the bytes by which the device peaks exceed their limits, summed. Each
    chromosome is decoded on its own, so the result does not depend on the number of threads.
    """
    m = population.shape[0]
    none_f = np.empty(0, dtype=np.float64)
    none_i = np.empty(0, dtype=np.int32)
    none_m = np.empty((0, d), dtype=np.int64)
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        device_peak = np.empty(d, dtype=np.int64)
        makespan[i] = decode_timed(population[i], n, d, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx,
                                   out_ptr, out_idx, nbytes, temp, resident, output, reuse_ptr, reuse_idx,
                                   cost, speed, bandwidth, latency, placement, device_peak, none_f, none_f,
                                   none_i, none_f, none_i, none_f, none_m)
        over = np.int64(0)
        for k in range(d):
            if limit[k] >= 0 and device_peak[k] > limit[k]:
                over += device_peak[k] - limit[k]
        excess[i] = over


# ---------------------------------------------------------------------------- list schedulers
# HEFT (Topcuoglu, Hariri and Wu, IEEE TPDS 2002) and the bottom levels of the critical-path list
# scheduler, for `regal.timed_heuristics`.

@numba.njit(**_JIT)
def bottom_levels(topo, succ_ptr, succ_idx, out_ptr, out_idx, work, comm, placement, level):
    """level[v] = work[v] + max over successors w of (edge + level[w]), edge = comm[v] for a data
    edge that crosses devices (placement[v] != placement[w]; with placement all -1, every data
    edge), else 0. topo: int32[n] topological; work, comm: float64[n]; writes level: float64[n]."""
    n = topo.shape[0]
    is_data = np.zeros(n, dtype=np.bool_)
    for t in range(n - 1, -1, -1):
        v = topo[t]
        for e in range(out_ptr[v], out_ptr[v + 1]):
            is_data[out_idx[e]] = True
        best = 0.0
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            x = level[w]
            if is_data[w] and (placement[v] < 0 or placement[v] != placement[w]):
                x += comm[v]
            if x > best:
                best = x
        for e in range(out_ptr[v], out_ptr[v + 1]):
            is_data[out_idx[e]] = False
        level[v] = work[v] + best


@numba.njit(**_JIT)
def heft_schedule(order, n, d, pred_ptr, pred_idx, in_ptr, in_idx, out_ptr, nbytes, resident, cost,
                  speed, bandwidth, latency, kept, cap, placement, ast):
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
        left[u] = out_ptr[u + 1] - out_ptr[u]
    for t in range(order.shape[0]):
        v = order[t]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            is_data[in_idx[e]] = True
        best_k = 0
        best_s = 0.0
        best_f = np.inf
        best_pos = 0
        best_over = np.int64(1) << 62
        for k in range(d):
            need = booked[k] + (0 if resident[v] else nbytes[v])
            for e in range(in_ptr[v], in_ptr[v + 1]):
                u = in_idx[e]
                if placement[u] < 0 or (placement[u] != k and not copied[u, k]):
                    need += nbytes[u]  # repeated inputs count once more each: a bound, not exact
            over = max(need - cap[k], np.int64(0))
            if over > best_over:
                continue
            ready = 0.0
            for e in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[e]
                r = aft[u]
                if is_data[u] and placement[u] >= 0 and placement[u] != k:
                    r += latency + nbytes[u] / bandwidth
                if r > ready:
                    ready = r
            dur = cost[v] / speed[k]
            # earliest gap after `ready`: intervals do not overlap, so their ends are sorted too;
            # skip (binary search) those that end by `ready`, then walk the gaps
            lo = 0
            hi = cnt[k]
            while lo < hi:
                mid = (lo + hi) >> 1
                if s_end[k, mid] <= ready:
                    lo = mid + 1
                else:
                    hi = mid
            prev_end = s_end[k, lo - 1] if lo > 0 else 0.0
            pos = cnt[k]
            for i in range(lo, cnt[k]):
                st = max(ready, prev_end)
                if st + dur <= s_start[k, i]:
                    pos = i
                    break
                prev_end = s_end[k, i]
            s = max(ready, prev_end)
            f = s + dur
            if over < best_over or f < best_f:
                best_f, best_s, best_k, best_pos, best_over = f, s, k, pos, over
        k = best_k
        if not resident[v]:
            booked[k] += nbytes[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            is_data[u] = False
            if placement[u] < 0:  # an unplaced resident input goes with its first consumer
                placement[u] = k
                booked[k] += nbytes[u]
            elif placement[u] != k and not copied[u, k]:
                copied[u, k] = True
                booked[k] += nbytes[u]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            left[u] -= 1
            if left[u] == 0 and not kept[u]:
                booked[placement[u]] -= nbytes[u]
                for q in range(d):
                    if copied[u, q]:
                        booked[q] -= nbytes[u]
        for i in range(cnt[k], best_pos, -1):
            s_start[k, i] = s_start[k, i - 1]
            s_end[k, i] = s_end[k, i - 1]
        s_start[k, best_pos] = best_s
        s_end[k, best_pos] = best_f
        cnt[k] += 1
        placement[v] = k
        ast[v] = best_s
        aft[v] = best_f
    rbytes = np.zeros(d, dtype=np.int64)
    for u in range(n):
        if resident[u] and placement[u] >= 0:
            rbytes[placement[u]] += nbytes[u]
    for u in range(n):
        if placement[u] < 0:
            k = 0
            for j in range(1, d):
                if rbytes[j] < rbytes[k]:
                    k = j
            placement[u] = k
            rbytes[k] += nbytes[u]
