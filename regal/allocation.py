"""What an XLA-style allocator reserves for a schedule (SPEC section 3a): the allocation model.

SPEC section 3's peak is the most bytes alive at once, without addresses. XLA's buffer
assignment needs more, for two reasons a per-step count cannot see: it gives every graph output
its own allocation for the whole program (before the output is written, too), and it packs the
other values (temporaries) into one preallocated block by address, so the block can be larger
than its busiest step. This module reproduces that assignment for a placement and order (XLA's
`BufferAssigner` and `HeapSimulator`; the rules below are read from XLA's source,
`buffer_assignment.cc` and `heap_simulator.cc`):

1. **Arguments**: every resident node has its own allocation (read-only: nothing else goes in).
2. **Values**, sorted by size (largest first), then graph outputs before other values, then by
   the position of their node in a post-order of the graph (from the outputs, operands in order):
   - a graph output gets its own allocation, live from its step to the end;
   - a temporary (any other non-resident node, and a copy of a remote input) goes into an
     existing allocation when it fits there (its size is at most the allocation's) and its live
     range overlaps no value already in it: first the allocations of its own inputs, then every
     other from the smallest (the most recently made) up. Live ranges are closed intervals of
     steps, `[its step, the step that frees it]` (section 3's free rules); two that only touch,
     one ending at the step the other starts, do not overlap when the later node may take the
     earlier over (field `reuse`: the earlier is on that node's list, on the same device, and
     that step frees it);
   - the rest are deferred to the heap.
3. **Heap**: the deferred temporaries, a chain of take-overs (section 3, step 2) sharing one
   buffer, are placed by address, decreasing-size best fit (each at the lowest offset of the
   smallest gap it fits among the buffers whose live ranges overlap its own, else above them):
   once in order of size (ties: the first value's life, longest first) and once in order of the
   chain's life, longest first (ties: size), the smaller heap kept (XLA's
   `ChooseBestHeapAlgorithm` over `kSpatial` and `kTemporal`). Lives are measured, for these
   orders only, in XLA's heap-simulator ticks: one per start and one per end of a deferred
   value, a step's starts before its ends. Sizes are rounded up to `alignment` bytes (64).
4. A device's allocation is arguments + outputs + heap; `allocation_bytes` is the largest over
   devices. With d > 1 each device is taken as its own program: the copies a device receives
   are its temporaries, live from the first to the last consumer on it.

On the 101 XLA:CPU programs of the data set, at XLA's own schedule, this is within 2 % of XLA's
allocation (`compiled.memory_analysis()`) on 45 of 45 forward graphs and 56 of 56 training steps
(ratio 0.991-1.006; `experiments/results/xla_fidelity/README.md`). It is informative: the
searches minimise the section 3 peak, which it never undercuts where no value shares a buffer at
a touching step (tested without `reuse`).

Cost: O(v log v) to sort the v values. The packing (issue 36: it tested every value against
every allocation and each value in it, 262 s at 300K nodes) keeps each allocation's values
sorted by start and each block of BLOCK allocations the gaps between them, so that an
allocation is tested, or a block ruled out, by binary search: O(v log v) per block passed, plus
the sorted inserts' moves (memmove, bounded by the values one allocation or block holds). The
heap is O(h^2) for the h deferred temporaries (about 1 % of v). Run on demand, not inside a
search (0.2 s at 10K nodes, 1.1 s at 80K, 6 s at 300K, d = 2; `benchmarks/results/allocation_speed.md`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.kernels.alloc import assign as _assign, best_fit as _best_fit
from regal._takeover import takers
from regal.graph import Graph, csr, check_devices
from regal.simulate import check_schedule

__all__ = ["Allocation", "allocation", "post_order", "ALIGNMENT"]

#: Heap buffer sizes are rounded up to this many bytes.
ALIGNMENT = 64


class Allocation(NamedTuple):
    """An allocation model's result (SPEC section 3a); per-device arrays are int64[d]."""
    allocation_bytes: int                  # max over devices of device_allocation_bytes
    device_allocation_bytes: np.ndarray    # argument + output + heap bytes of each device
    argument_bytes: np.ndarray             # resident nodes placed on the device
    output_bytes: np.ndarray               # graph outputs homed on it, one allocation each
    heap_bytes: np.ndarray                 # the preallocated block of the deferred temporaries
    packed: np.ndarray                     # temporaries placed inside output allocations


def post_order(graph: Graph) -> np.ndarray:
    """int64[n]: each node's position in a depth-first post-order of the graph from its outputs
    (`meta["outputs"]` in that order when the importer recorded it, else the graph outputs in
    node order), operands in their order; nodes it does not reach follow, from the nodes without
    consumers. XLA breaks ties among values of one size by this (`MakeInstructionPostOrder`)."""
    n = graph.num_nodes
    index = graph.index
    named = [index[i] for i in graph.meta.get("outputs", []) if i in index] if isinstance(graph.meta, dict) else []
    roots = named + np.flatnonzero(graph.kept & ~graph.resident).tolist() + np.flatnonzero(
        np.diff(graph.out_ptr) == 0).tolist() + list(range(n))
    pos = np.full(n, -1, dtype=np.int64)
    count = 0
    in_ptr, in_idx = graph.in_ptr, graph.in_idx
    for r in roots:
        if pos[r] >= 0:
            continue
        stack = [(r, False)]
        while stack:
            v, done = stack.pop()
            if pos[v] >= 0:
                continue
            if done:
                pos[v] = count
                count += 1
                continue
            stack.append((v, True))
            for u in in_idx[in_ptr[v]:in_ptr[v + 1]][::-1].tolist():
                if pos[u] < 0:
                    stack.append((u, False))
    return pos


# ---------------------------------------------------------------------------- kernels
def _heap(deferred, size, start, end, key, taker, alignment) -> int:
    """Rule 3: the heap of the deferred buffers (indices into the device's value arrays);
    taker[b]: the value that took b over (section 3, step 2), or -1. A take-over chain is one
    buffer, live from its first value's step to its last's."""
    root = {b: b for b in deferred.tolist()}

    def find(b):
        while root[b] != b:
            b = root[b]
        return b

    for b in deferred.tolist():
        t = int(taker[b])
        if t >= 0 and t in root:
            ra, rb = find(b), find(t)
            if ra != rb:
                root[rb] = ra
    roots, inv = np.unique([find(b) for b in deferred.tolist()], return_inverse=True)
    h = roots.shape[0]
    big = np.iinfo(np.int64).max
    size_g, key_g = np.zeros(h, dtype=np.int64), np.full(h, big, dtype=np.int64)
    start_g, end_g = np.full(h, big, dtype=np.int64), np.full(h, -1, dtype=np.int64)
    np.maximum.at(size_g, inv, size[deferred])
    np.minimum.at(key_g, inv, key[deferred])
    np.minimum.at(start_g, inv, start[deferred])
    np.maximum.at(end_g, inv, end[deferred])
    # lengths count XLA's heap-simulator ticks (one per allocation and per free of a deferred
    # value, a step's allocations before its frees), which order the buffers differently from
    # steps; overlaps are the same in either
    m = deferred.shape[0]
    tick = np.empty(2 * m, dtype=np.int64)
    tick[np.argsort(np.concatenate([start[deferred] * 2, end[deferred] * 2 + 1]), kind="stable")] = np.arange(2 * m)
    t0, t1 = tick[:m], tick[m:]
    span_start, span_end = np.full(h, big, dtype=np.int64), np.full(h, -1, dtype=np.int64)
    np.minimum.at(span_start, inv, t0)
    np.maximum.at(span_end, inv, t1)
    span = span_end - span_start                  # the chain's, for the temporal order
    own = np.zeros(h, dtype=np.int64)             # its first value's own, for the spatial order
    first = np.lexsort((start[deferred], inv))[::-1]
    own[inv[first]] = (t1 - t0)[first]
    size_g = (size_g + alignment - 1) // alignment * alignment
    spatial = np.lexsort((key_g, -own, -size_g))
    temporal = np.lexsort((key_g, -size_g, -span))
    return int(min(_best_fit(size_g, start_g, end_g, spatial), _best_fit(size_g, start_g, end_g, temporal)))


def allocation(graph: Graph, placement, order, devices: int | None = None, *,
               alignment: int = ALIGNMENT) -> Allocation:
    """SPEC section 3a's allocation of (placement, order) on `devices` devices (default: one
    more than the largest device in `placement`). ScheduleError on an invalid schedule."""
    n = graph.num_nodes
    placement = np.asarray(placement, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    d = int(placement.max(initial=0)) + 1 if devices is None else int(devices)
    check_devices(d)
    check_schedule(graph, placement, order, d)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    out = graph.kept & ~graph.resident
    home_end, copies = _lifetimes(graph, placement, pos, out)
    taken_by = takers(graph, placement, order)   # section 3 step 2: the heap shares their buffers
    rank = post_order(graph)
    nbytes = graph.bytes.astype(np.int64)
    res = {key: np.zeros(d, dtype=np.int64) for key in ("arg", "out", "heap", "packed")}
    np.add.at(res["arg"], placement[graph.resident], nbytes[graph.resident])
    for k in range(d):
        res["out"][k], res["packed"][k], res["heap"][k] = _device(
            graph, k, placement, pos, out, home_end, copies, taken_by, rank, int(alignment))
    total = res["arg"] + res["out"] + res["heap"]
    return Allocation(int(total.max()), total, res["arg"], res["out"], res["heap"], res["packed"])


def _lifetimes(graph: Graph, placement, pos, out) -> tuple[np.ndarray, dict]:
    """Home-copy lifetimes (section 3's free rules): the step that frees each node's home copy
    (graph outputs: the end of the run), and the copies each device receives,
    (u, device) -> [first, last consumer step]."""
    n = graph.num_nodes
    home_end = pos.copy()
    copies: dict[tuple[int, int], list[int]] = {}
    for u in range(n):
        cons = graph.consumers(u)
        if cons.shape[0] == 0:
            continue
        k = placement[u]
        cp = pos[cons]
        ck = placement[cons]
        on_home = cp[ck == k]
        last = int(on_home.max()) if on_home.shape[0] else int(pos[u])
        for q in np.unique(ck[ck != k]).tolist():
            steps = cp[ck == q]
            copies[(u, q)] = [int(steps.min()), int(steps.max())]
            last = max(last, int(steps.min()))
        home_end[u] = last
    home_end[out] = n
    return home_end, copies


def _device(graph: Graph, k: int, placement, pos, out, home_end, copies, taken_by, rank,
            alignment: int) -> tuple[int, int, int]:
    """(output bytes, temporaries packed into outputs, heap bytes) of device k."""
    vals = _values(graph, k, placement, pos, out, home_end, copies, rank)
    m = vals.size.shape[0]
    ops, shares = [[] for _ in range(m)], [[] for _ in range(m)]
    for w in vals.homed:
        b = vals.buf_of[w]
        for u in graph.inputs(w).tolist():
            if u in vals.buf_of:
                ops[b].append(vals.buf_of[u])
            elif u in vals.copy_of:
                ops[b].append(vals.copy_of[u])
        for u in graph.reuse(w).tolist():
            if u in vals.buf_of and not out[u] and home_end[u] == pos[w]:
                shares[b].append(vals.buf_of[u])
    ranked = np.lexsort((vals.key, ~vals.live, -vals.size)).astype(np.int64)
    op_ptr, op_idx = csr(m, ops)
    sh_ptr, sh_idx = csr(m, shares)
    where = _assign(vals.size, vals.start, vals.end, vals.live, ranked, op_ptr, op_idx, sh_ptr, sh_idx)
    taker = np.full(m, -1, dtype=np.int64)
    for u in vals.homed:
        if taken_by[u] >= 0 and int(taken_by[u]) in vals.buf_of:
            taker[vals.buf_of[u]] = vals.buf_of[int(taken_by[u])]
    deferred = np.flatnonzero(where < 0)
    heap = _heap(deferred, vals.size, vals.start, vals.end, vals.key, taker, alignment) if deferred.shape[0] else 0
    return int(vals.size[vals.live].sum()), int(((where >= 0) & ~vals.live).sum()), heap


class _Values(NamedTuple):
    """Device k's values (m of them): its homed nodes, then the copies it receives, then the
    nodes' scratch; int64[m] arrays but `live` (bool[m]: graph outputs)."""
    homed: list     # the homed nodes, buffers 0, 1, ...
    buf_of: dict    # homed node -> its buffer
    copy_of: dict   # node -> the buffer of its copy on k
    size: np.ndarray
    start: np.ndarray
    end: np.ndarray
    live: np.ndarray
    key: np.ndarray  # post-order rank of the node


def _values(graph: Graph, k: int, placement, pos, out, home_end, copies, rank) -> _Values:
    resident = graph.resident
    nbytes = graph.bytes.astype(np.int64)
    homed = np.flatnonzero((placement == k) & ~resident & ((nbytes > 0) | out))
    values = homed.tolist()
    buf_of = {int(v): i for i, v in enumerate(values)}
    size = nbytes[homed].tolist()
    start = pos[homed].tolist()
    end = home_end[homed].tolist()
    live = out[homed].tolist()
    key = rank[homed].tolist()
    copy_of = {}
    for (u, q), (first, last) in copies.items():
        if q == k and nbytes[u] > 0:
            copy_of[u] = len(size)
            size.append(int(nbytes[u]))
            start.append(first)
            end.append(last)
            live.append(False)
            key.append(int(rank[u]))
    for v in np.flatnonzero((placement == k) & ~resident & (graph.temp_bytes > 0)).tolist():
        size.append(int(graph.temp_bytes[v]))  # a node's scratch: a temporary of its own step
        start.append(int(pos[v]))
        end.append(int(pos[v]))
        live.append(False)
        key.append(int(rank[v]))
    i64 = np.int64
    return _Values(values, buf_of, copy_of, np.asarray(size, dtype=i64), np.asarray(start, dtype=i64),
                   np.asarray(end, dtype=i64), np.asarray(live, dtype=np.bool_), np.asarray(key, dtype=i64))
