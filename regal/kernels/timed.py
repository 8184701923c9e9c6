"""Numba kernels of the timed model (SPEC.md section 4, settled in docs/timed-model.md): an
event-driven simulation of a placement and scheduling priorities that returns the makespan and
every device's peak memory, its decoder from the timed chromosome (section 5) and the batched
population evaluation. HEFT's list scheduler is `regal.kernels.heft`.

Structs in, arrays out, as in `regal.kernels.decode` (same JIT options): the graph is
`regal.kernels.structs.KernelGraph` (`g`; the timed model reads its `output`: graph outputs, whose
home copy is never freed, and `cost`: float64[n] seconds on the nominal device), the devices
`TimedDevices`, and what a simulation writes besides the makespan `TimedRecord`. The public
wrappers in `regal.timed` validate first. The naive twin of `simulate_timed` is
`tests/naive_timed.py`.
"""

from typing import NamedTuple

import numba
import numpy as np

from regal.kernels.heap import heap_pop as _pop, heap_push as _push, sorted_push as _sorted_push
from regal._jit import JIT as _JIT, PARALLEL_JIT, UINDEX as _U
from regal._takeover import taken_over

#: The simulation's loops (`_start_residents`, `_events`) run without reference counting (they
#: allocate nothing: the state comes from `_new_run`), their steps (`_STEP`) inlined into them:
#: with the counting, passing the structs to a step costs an atomic increment and decrement per
#: array per call, several times the work. `forceinline` compiles them and `_new_run` into
#: `simulate_timed` (LLVM), as fast as the one-function kernel they were cut from.
_LOOP = dict(_nrt=False, forceinline=True, **_JIT)
_SETUP = dict(forceinline=True, **_JIT)
_STEP = dict(inline="always", **_JIT)


class TimedDevices(NamedTuple):
    """The device model as the kernels read it (d devices)."""
    speed: np.ndarray  # float64[d]  a node runs cost / speed[k] seconds on device k
    bandwidth: float   # bytes/s of every directed link p -> q, p != q (one transfer at a time)
    latency: float     # s, added to every transfer


class TimedRecord(NamedTuple):
    """What `simulate_timed` writes besides the makespan (n nodes, d devices); the arrays after
    `device_peak` may have 0 entries (0 rows), and then are not written."""
    device_peak: np.ndarray  # int64[d]      bytes, over time
    start: np.ndarray        # float64[n]    resident nodes: 0
    finish: np.ndarray       # float64[n]
    seq: np.ndarray          # int32[n]      starts numbered in the order they happen
    tr_start: np.ndarray     # float64[n*d]  the transfer of u to q at [u*d + q] (untouched where none)
    tr_seq: np.ndarray       # int32[n*d]
    trace_t: np.ndarray      # float64[R]    instants (n*d + 1 rows suffice)
    trace_m: np.ndarray      # int64[R, d]   every device's bytes after the instant's starts


class _Run(NamedTuple):
    """A simulation's state (n nodes, d devices, d*d links: link l = p*d + q sends p -> q)."""
    cons: np.ndarray       # int32[n*d]  [u*d + k]: u's consumers on k that have not finished
    held: np.ndarray       # int32[n]    what holds u's home copy: its home consumers that have not
    #                                    finished and its transfers that have not arrived
    wait: np.ndarray       # int32[n]    predecessors to finish and remote inputs to arrive
    sends: np.ndarray      # int32[n]    transfers of u (devices other than home that read u)
    taken: np.ndarray      # int64[n]    bytes each running node took over (0 entries: no `reuse`)
    rkey: np.ndarray       # float64[*]  every device's ready nodes: a max-heap by priority at
    rnode: np.ndarray      # int32[*]    rkey/rnode[dbase[k]:], dsize[k] long
    dbase: np.ndarray      # int64[d]
    dsize: np.ndarray      # int64[d]
    pkey: np.ndarray       # float64[*]  every link's queued transfers, likewise
    pnode: np.ndarray      # int32[*]
    lbase: np.ndarray      # int64[d*d]
    lsize: np.ndarray      # int64[d*d]
    mem: np.ndarray        # int64[d]    bytes now
    dev_node: np.ndarray   # int32[d]    the node running on each device, -1 idle
    link_node: np.ndarray  # int32[d*d]  the tensor each link sends, -1 idle
    ekey: np.ndarray       # float64[d + d*d]  running tasks by -finish time, a sorted array with
    eslot: np.ndarray      # int32[d + d*d]    the next to finish at the end (ties: the lower slot
    #                                          there; `_heap.sorted_push`): device k is slot k,
    #                                          link l slot d + l. Few tasks run at once, so an
    #                                          insertion moves a few entries, and taking the next
    #                                          is a decrement, not a heap's mispredicted sift.
    dcand: np.ndarray      # int32[d]    devices that may start a task at this instant
    dflag: np.ndarray      # bool[d]
    lcand: np.ndarray      # int32[d*d]  links likewise
    lflag: np.ndarray      # bool[d*d]
    dest: np.ndarray       # int32[n*d]  [u*d : u*d + sends[u]]: the devices u is sent to, ascending


@numba.njit(**_SETUP)
def _new_run(g, placement, d):
    """The state at time 0: counts, and queues sized to what each device and link will hold."""
    n = g.num_nodes
    dd = d * d
    cons = np.zeros(n * d, dtype=np.int32)
    wait = np.empty(n, dtype=np.int32)
    for v in range(n):
        k = placement[v]
        w = g.pred_cnt[v]
        for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
            u = g.in_idx[e]
            cons[u * d + k] += 1
            w += placement[u] != k
        wait[v] = w
    sends = np.zeros(n, dtype=np.int32)
    dest = np.empty(n * d, dtype=np.int32)
    held = np.empty(n, dtype=np.int32)
    dcap = np.zeros(d, dtype=np.int64)
    lcap = np.zeros(dd, dtype=np.int64)
    for u in range(n):
        h = placement[u]
        dcap[h] += not g.resident[u]
        c = 0
        if d > 1:
            for q in range(d):  # without branches: placements are random, a branch would mispredict
                x = (q != h) & (cons[u * d + q] > 0)
                dest[u * d + c] = q
                c += x
                lcap[h * d + q] += x
        sends[u] = c
        held[u] = cons[u * d + h] + c
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
    return _Run(cons, held, wait, sends, np.zeros(n if g.reuse_idx.shape[0] > 0 else 0, dtype=np.int64),
                rkey, rnode, dbase, np.zeros(d, dtype=np.int64), np.empty(max(acc, 1), dtype=np.float64),
                np.empty(max(acc, 1), dtype=np.int32), lbase, np.zeros(dd, dtype=np.int64), np.zeros(d, dtype=np.int64),
                np.full(d, -1, dtype=np.int32), np.full(dd, -1, dtype=np.int32), np.empty(d + dd, dtype=np.float64),
                np.empty(d + dd, dtype=np.int32), np.arange(d).astype(np.int32), np.ones(d, dtype=np.bool_),
                np.empty(dd, dtype=np.int32), np.zeros(dd, dtype=np.bool_), dest)


@numba.njit(**_STEP)
def _ready(s, w, k, key, ndc):
    """Node w is ready on device k: queue it, and have k look at its queue; returns ndc."""
    s.dsize[k] = _push(s.rkey, s.rnode, s.dbase[k], s.dsize[k], key, w)
    if not s.dflag[k]:
        s.dflag[k] = True
        s.dcand[ndc] = k
        ndc += 1
    return ndc


@numba.njit(**_STEP)
def _send(s, u, h, tprio, d, nlc):
    """u is ready on its home h: queue its transfer to every other device that reads it, and have
    those links look at their queues; returns nlc."""
    for i in range(s.sends[u]):
        q = s.dest[u * d + i]
        l = h * d + q
        s.lsize[l] = _push(s.pkey, s.pnode, s.lbase[l], s.lsize[l], tprio[u, q], u)
        if not s.lflag[l]:
            s.lflag[l] = True
            s.lcand[nlc] = l
            nlc += 1
    return nlc


@numba.njit(**_JIT)
def simulate_timed(g, dev, placement, prio, tprio, rec):
    """Makespan (s) of running the placement with these priorities (SPEC.md section 4).

    g: `KernelGraph`; dev: `TimedDevices`; placement: int32[n]; prio: float64[n], scheduling
    priority (higher runs first among a device's ready nodes, ties to the lower index); tprio:
    float64[n, d], tprio[u, q] the priority of the transfer of u to device q on its link (higher
    first, ties to the lower u). Writes rec (`TimedRecord`): device_peak always; start, finish,
    seq, tr_start, tr_seq when start has n entries; trace_t, trace_m when trace_t has entries:
    after every instant's starts, the time and every device's bytes (memory is constant from
    there to the next instant, and that row is the instant's highest); rows past the last
    instant are untouched. seq and tr_seq number the starts in the order they happen (resident
    nodes first, by index): sorting by them gives the dispatch order, even among tasks of zero
    length that start at the same instant.

    Each instant t: every task (node run or transfer) finishing at t is retired first (temp,
    inputs and home copies freed, successors made ready, transfers queued), then every idle
    device starts its best ready node and every idle link its best queued transfer. Memory
    only falls while retiring and only rises while starting, so the order inside either phase
    changes nothing. Tasks of zero length finish at the same t and are retired in a next round.
    A graph output (`output`) keeps its home copy to the end, as a resident node does; its copies
    on other devices go after their last consumer there. A home copy goes when its home
    consumers have finished and its transfers have arrived (`held` counts both).

    Taking over (`reuse`, SPEC.md section 3): node v starting on k takes over what
    `regal._takeover.taken_over` decides, `last` being `held` (v reads each of its `reuse`
    inputs, so for one homed on k the count is 1 exactly when v is its last home consumer and
    every transfer has arrived: v's step frees the home copy); v then holds that many bytes
    fewer while it runs, and after it the bytes are as without the field.
    """
    s = _new_run(g, placement, dev.speed.shape[0])
    nlc, nseq = _start_residents(g, s, placement, prio, tprio, rec)
    return _events(g, dev, s, placement, prio, tprio, rec, nlc, nseq)


@numba.njit(**_LOOP)
def _events(g, dev, s, placement, prio, tprio, rec, nlc, nseq):
    """`simulate_timed`'s event loop, from time 0 on; returns the makespan."""
    d = s.mem.shape[0]
    record = rec.start.shape[0] > 0
    ntrace = 0
    esize = 0
    t = 0.0
    makespan = 0.0
    ndc = d  # every device looks at its queue at time 0
    while True:
        # start: every idle device its best ready node, every idle link its best transfer
        esize, nseq = _start_nodes(g, dev, s, placement, t, ndc, esize, nseq, rec, record)
        ndc = 0
        esize, nseq = _start_transfers(g, dev, s, t, nlc, esize, nseq, rec, record)
        nlc = 0
        if rec.trace_t.shape[0] > 0:
            rec.trace_t[ntrace] = t
            for k in range(d):
                rec.trace_m[ntrace, k] = s.mem[k]
            ntrace += 1
        if esize == 0:
            return makespan
        # advance to the next finish and retire everything that ends then
        t = -s.ekey[esize - 1]
        while esize > 0 and -s.ekey[esize - 1] == t:
            esize -= 1
            slot = s.eslot[esize]
            if slot < d:  # node finished on device `slot`
                ndc, nlc = _finish_node(g, s, placement, prio, tprio, slot, t, ndc, nlc, rec, record)
                if t > makespan:
                    makespan = t
            else:
                ndc, nlc = _finish_transfer(g, s, placement, prio, slot - d, d, ndc, nlc)


@numba.njit(**_LOOP)
def _start_residents(g, s, placement, prio, tprio, rec):
    """Time 0: resident nodes are present (their successors and transfers go as if they finished
    then), nodes without predecessors ready; returns (nlc, nseq)."""
    n, d = g.num_nodes, s.mem.shape[0]
    record = rec.start.shape[0] > 0
    for u in range(n):
        if g.resident[u]:
            s.mem[placement[u]] += g.nbytes[u]
    for k in range(d):
        rec.device_peak[k] = s.mem[k]
    nlc = 0
    nseq = 0
    for u in range(n):
        if g.resident[u]:
            if record:
                rec.start[u] = 0.0
                rec.finish[u] = 0.0
                rec.seq[u] = nseq
                nseq += 1
            for e in range(g.succ_ptr[u], g.succ_ptr[u + 1]):
                w = g.succ_idx[e]
                s.wait[w] -= 1
                if s.wait[w] == 0:
                    _ready(s, w, placement[w], prio[w], d)  # every device is already marked
            if s.sends[u] > 0:
                nlc = _send(s, u, placement[u], tprio, d, nlc)
        elif g.pred_cnt[u] == 0:
            _ready(s, u, placement[u], prio[u], d)
    return nlc, nseq


@numba.njit(**_STEP)
def _start_nodes(g, dev, s, placement, t, ndc, esize, nseq, rec, record):
    """Every marked idle device starts its best ready node (taking inputs over, SPEC.md section
    3); returns (esize, nseq)."""
    for i in range(ndc):
        k = s.dcand[i]
        s.dflag[k] = False
        if s.dev_node[k] < 0 and s.dsize[k] > 0:
            v, s.dsize[k] = _pop(s.rkey, s.rnode, s.dbase[k], s.dsize[k])
            s.dev_node[k] = v
            tk = 0
            if s.taken.shape[0] > 0:
                tk = taken_over(v, k, g.reuse_ptr, g.reuse_idx, g.nbytes, g.resident, placement, s.held)
                s.taken[v] = tk
            m = s.mem[k] + g.nbytes[v] + g.temp[v] - tk
            s.mem[k] = m
            if m > rec.device_peak[k]:
                rec.device_peak[k] = m
            esize = _sorted_push(s.ekey, s.eslot, esize, -(t + g.cost[v] / dev.speed[k]), k)
            if record:
                rec.start[v] = t
                rec.seq[v] = nseq
                nseq += 1
    return esize, nseq


@numba.njit(**_STEP)
def _start_transfers(g, dev, s, t, nlc, esize, nseq, rec, record):
    """Every marked idle link starts its best queued transfer; returns (esize, nseq)."""
    d = s.mem.shape[0]
    for i in range(nlc):
        l = s.lcand[i]
        s.lflag[l] = False
        if s.link_node[l] < 0 and s.lsize[l] > 0:
            u, s.lsize[l] = _pop(s.pkey, s.pnode, s.lbase[l], s.lsize[l])
            q = l % d
            s.link_node[l] = u
            m = s.mem[q] + g.nbytes[u]  # the copy occupies memory from the transfer's start
            s.mem[q] = m
            if m > rec.device_peak[q]:
                rec.device_peak[q] = m
            esize = _sorted_push(s.ekey, s.eslot, esize, -(t + (dev.latency + g.nbytes[u] / dev.bandwidth)), d + l)
            if record:
                rec.tr_start[u * d + q] = t
                rec.tr_seq[u * d + q] = nseq
                nseq += 1
    return esize, nseq


@numba.njit(**_STEP)
def _finish_node(g, s, placement, prio, tprio, k, t, ndc, nlc, rec, record):
    """Node v finished on device k at t: free its temp and what it took over back, ready its
    successors, free inputs it was the last to read, queue its transfers; returns (ndc, nlc)."""
    d = s.mem.shape[0]
    v = s.dev_node[k]
    s.dev_node[k] = -1
    if not s.dflag[k]:
        s.dflag[k] = True
        s.dcand[ndc] = k
        ndc += 1
    s.mem[k] -= g.temp[v]
    if s.taken.shape[0] > 0:
        s.mem[k] += s.taken[v]
    if record:
        rec.finish[v] = t
    for e in range(_U(g.succ_ptr[v]), _U(g.succ_ptr[v + 1])):
        w = _U(g.succ_idx[e])
        c = s.wait[w] - 1
        s.wait[w] = c
        if c == 0:
            ndc = _ready(s, w, placement[w], prio[w], ndc)
    freed = 0
    if d == 1:  # every input at home
        for e in range(g.in_ptr[v], g.in_ptr[v + 1]):
            u = g.in_idx[e]
            c = s.held[u] - 1
            s.held[u] = c
            if c == 0 and not g.resident[u] and not g.output[u]:
                freed += g.nbytes[u]
    else:
        for e in range(_U(g.in_ptr[v]), _U(g.in_ptr[v + 1])):  # without branches: placements are random
            u = _U(g.in_idx[e])
            remote = placement[u] != k
            j = u * _U(d) + _U(k)
            rc = s.cons[j] - remote  # the copy on k goes after its last consumer there
            s.cons[j] = rc
            hc = s.held[u] - (not remote)  # the home copy once home consumers are done, copies sent
            s.held[u] = hc
            free = (remote & (rc == 0)) | ((not remote) & (hc == 0) & (not g.resident[u]) & (not g.output[u]))
            freed += g.nbytes[u] * free
    s.mem[k] -= freed
    if s.sends[v] > 0:
        nlc = _send(s, v, k, tprio, d, nlc)
    return ndc, nlc


@numba.njit(**_STEP)
def _finish_transfer(g, s, placement, prio, l, d, ndc, nlc):
    """The transfer on link l arrived: its consumers there may become ready, and the home copy
    goes when this was the last thing holding it; returns (ndc, nlc)."""
    u = s.link_node[l]
    s.link_node[l] = -1
    q = l % d
    h = l // d
    if not s.lflag[l]:
        s.lflag[l] = True
        s.lcand[nlc] = l
        nlc += 1
    for e in range(_U(g.out_ptr[u]), _U(g.out_ptr[u + 1])):
        w = _U(g.out_idx[e])
        there = placement[w] == q
        c = s.wait[w] - there
        s.wait[w] = c
        if there & (c == 0):
            ndc = _ready(s, w, q, prio[w], ndc)
    c = s.held[u] - 1
    s.held[u] = c
    if c == 0 and not g.resident[u] and not g.output[u]:
        s.mem[h] -= g.nbytes[u]
    return ndc, nlc


@numba.njit(**_JIT)
def decode_timed(keys, g, dev, placement, rec):
    """Decode one timed chromosome (SPEC.md section 5) and return its makespan (section 4).

    keys: float64[n*(2d+1)], node v's row keys[v*(2d+1) : (v+1)*(2d+1)] holds its d device
    affinities (placement = argmax, ties to the lower device), its scheduling priority, then the
    priorities of the transfers of its output to devices 0..d-1. Writes placement int32[n] and
    what `simulate_timed` writes.
    """
    n, d = g.num_nodes, dev.speed.shape[0]
    rows = keys.reshape((n, 2 * d + 1))
    for v in range(n):
        best = 0
        bk = rows[v, 0]
        for j in range(1, d):
            if rows[v, j] > bk:
                bk = rows[v, j]
                best = j
        placement[v] = best
    return simulate_timed(g, dev, placement, rows[:, d], rows[:, d + 1:], rec)


@numba.njit(**PARALLEL_JIT)
def evaluate_population_timed(population, g, dev, limit, makespan, excess):
    """Decode and simulate every chromosome of population float64[m, n*(2d+1)] in parallel.

    limit: int64[d] bytes per device (negative: none). Writes makespan: float64[m] seconds and
    excess: int64[m], the bytes by which the device peaks exceed their limits, summed. Each
    chromosome is decoded on its own, so the result does not depend on the number of threads.
    """
    m = population.shape[0]
    n, d = g.num_nodes, dev.speed.shape[0]
    none_f = np.empty(0, dtype=np.float64)
    none_i = np.empty(0, dtype=np.int32)
    none_m = np.empty((0, d), dtype=np.int64)
    for i in numba.prange(m):
        placement = np.empty(n, dtype=np.int32)
        device_peak = np.empty(d, dtype=np.int64)
        rec = TimedRecord(device_peak, none_f, none_f, none_i, none_f, none_i, none_f, none_m)
        makespan[i] = decode_timed(population[i], g, dev, placement, rec)
        over = np.int64(0)
        for k in range(d):
            if limit[k] >= 0 and device_peak[k] > limit[k]:
                over += device_peak[k] - limit[k]
        excess[i] = over
