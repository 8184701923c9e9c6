"""Compiler schedules and simple heuristics, each scored by the SPEC.md section 3 simulator.

- `solve_xla`: the order XLA itself chose (`graph.meta["xla_order"]` of a scheduled HLO module).
- `solve_xla_heuristics`: the best of XLA's three memory schedulers (list, DFS, post-order),
  re-implemented from `xla/hlo/transforms/simplifiers/hlo_memory_scheduler.cc`'s descriptions;
  XLA's `DefaultMemoryScheduler` also keeps the lowest simulated heap of the three.
- `solve_inductor_heuristics`: the best of PyTorch Inductor's peak-memory reorderings
  (`torch/_inductor/memory.py`: the original order, least-peak-memory-first, BFS, DFS).

(The greedy list scheduler and the random floor are in `baselines.greedy`.)

The compilers schedule one device. For d > 1, `solve_xla` puts every node on device 0 (what a
single-device compiler does); the xla- and inductor-heuristics take gp-dfs's METIS placement
(`baselines.partition.metis_placement`) and pick their best order under the d-device simulator.
Resident nodes are XLA's parameters and constants (ignored by its heuristics, as there) and
Inductor's non-freeable inputs. The loops that scan a ready list are Numba kernels here, next to
the one module that uses them, rather than in `regal._kernels`, which holds the library's own.
"""

from __future__ import annotations

import heapq
import time

import numba
import numpy as np

from baselines.partition import _check_devices
from regal.graph import Graph
from regal.simulate import kernel_graph, simulate
from regal.solution import Solution, make_solution
from regal.structure import concat_csr, dfs_postorder, metis_placement

__all__ = ["solve_xla", "solve_xla_heuristics", "solve_inductor_heuristics", "xla_list_order",
           "xla_dfs_order", "xla_post_order", "lpmf_order", "inductor_bfs_order", "inductor_dfs_order"]

_JIT = dict(nogil=True, cache=True)
_BIG = np.int64(2 ** 62)
#: XLA's list scheduler ranks effective scalars (one element) first; a graph keeps no shapes, so
#: a node of 1 to SCALAR_BYTES bytes counts as one.
SCALAR_BYTES = 8


# ---------------------------------------------------------------------------- XLA
@numba.njit(**_JIT)
def _xla_list_kernel(n, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                     nbytes, resident, scalar_bytes, order):
    """XLA's ListScheduler: repeatedly run the ready node of highest priority.

    Priority = (bytes freed - bytes defined, number of users); effective scalars first. A
    buffer is freed by the node that is its last unscheduled use; parameters and constants
    (resident) are ignored on both sides. XLA keeps ready nodes in a multimap keyed by priority
    and takes the last entry, so among equal priorities the most recently (re)inserted wins;
    `stamp` reproduces that. O(n * ready + e * max consumers).
    """
    uses = np.empty(n, dtype=np.int64)  # unscheduled uses of each buffer
    for u in range(n):
        uses[u] = out_ptr[u + 1] - out_ptr[u]
    freed = np.zeros(n, dtype=np.int64)  # bytes v frees if run now
    for v in range(n):
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if not resident[u] and uses[u] == 1:
                freed[v] += nbytes[u]
    indeg = pred_cnt.copy()
    scheduled = np.zeros(n, dtype=np.bool_)
    in_ready = np.zeros(n, dtype=np.bool_)
    stamp = np.zeros(n, dtype=np.int64)
    changed = np.full(n, -1, dtype=np.int64)  # the step at which a node's priority last rose
    ready = np.empty(n, dtype=np.int32)
    size = 0
    clock = 0
    for v in range(n):
        if indeg[v] == 0:
            ready[size] = v
            size += 1
            in_ready[v] = True
            clock += 1
            stamp[v] = clock
    t = 0
    while size > 0:
        best = -1
        bp = np.int64(0)
        bu = np.int64(0)
        bs = np.int64(0)
        for i in range(size):
            v = ready[i]
            if 0 < nbytes[v] <= scalar_bytes:
                p = _BIG
                nu = _BIG
            else:
                p = freed[v] - (0 if resident[v] else nbytes[v])
                nu = out_ptr[v + 1] - out_ptr[v]
            if best < 0 or p > bp or (p == bp and (nu > bu or (nu == bu and stamp[v] > bs))):
                best, bp, bu, bs = i, p, nu, stamp[v]
        v = ready[best]
        size -= 1
        ready[best] = ready[size]
        in_ready[v] = False
        scheduled[v] = True
        order[t] = v
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            uses[u] -= 1
            if uses[u] == 1 and not resident[u] and nbytes[u] > 0:
                for f in range(out_ptr[u], out_ptr[u + 1]):
                    w = out_idx[f]
                    if not scheduled[w]:
                        freed[w] += nbytes[u]
                        changed[w] = t
        # XLA then walks v's operands and their users, re-inserting (a new stamp) every ready
        # entry whose priority changed, once, in that walk's order
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            for f in range(out_ptr[u], out_ptr[u + 1]):
                w = out_idx[f]
                if in_ready[w] and changed[w] == t and not (0 < nbytes[w] <= scalar_bytes):
                    clock += 1
                    stamp[w] = clock
                    changed[w] = -1
        t += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[size] = w
                size += 1
                in_ready[w] = True
                clock += 1
                stamp[w] = clock
    return t


def xla_list_order(graph: Graph) -> np.ndarray:
    """int32[n]: XLA's list scheduler (see `_xla_list_kernel`); control edges are honored."""
    kg = kernel_graph(graph)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    t = _xla_list_kernel(kg.num_nodes, kg.pred_cnt, kg.succ_ptr, kg.succ_idx, kg.in_ptr, kg.in_idx,
                         kg.out_ptr, kg.out_idx, kg.nbytes, kg.resident, SCALAR_BYTES, order)
    assert t == graph.num_nodes
    return order


def _sinks(graph: Graph) -> np.ndarray:
    return np.flatnonzero(np.diff(graph.succ_ptr) == 0)


def xla_post_order(graph: Graph) -> np.ndarray:
    """int32[n]: XLA's PostOrderScheduler, `MakeInstructionPostOrder`.

    A DFS from each instruction without users (no data consumers, in node order) emits a node
    after its operands. XLA pushes the operands (reversed) and then the control predecessors on
    its stack, so the control predecessors are visited first (last listed first), then the
    operands in order. O(n + e).
    """
    ctrl_rev_ptr = graph.ctrl_in_ptr
    ctrl_rev_idx = graph.ctrl_in_idx.copy()
    for v in np.flatnonzero(np.diff(ctrl_rev_ptr) > 1):
        a, b = ctrl_rev_ptr[v], ctrl_rev_ptr[v + 1]
        ctrl_rev_idx[a:b] = ctrl_rev_idx[a:b][::-1]
    ptr, idx = concat_csr(ctrl_rev_ptr, ctrl_rev_idx, graph.in_ptr, graph.in_idx)
    roots = np.flatnonzero(np.diff(graph.out_ptr) == 0)
    order = dfs_postorder(roots, ptr, idx, graph.num_nodes)
    assert order.shape[0] == graph.num_nodes
    return order


def xla_dfs_order(graph: Graph, post_order: np.ndarray | None = None) -> np.ndarray:
    """int32[n]: XLA's DFSMemoryScheduler.

    For each instruction, in post-order: `extra_users` = max(users - 1, 0) plus the operands'
    (unique operands) `extra_users`, and `total_sizes` = its bytes plus the operands'
    `total_sizes`, both transitive and double-counting shared ancestors; XLA caps them by the
    running total of bytes and by the instruction count. Parameters and constants (resident)
    count zero. Then a post-order DFS from the sinks (XLA: the unreachable roots, then the root;
    here every node without successors, in node order) visits each node's operands and control
    predecessors sorted by extra_users (descending), then total_sizes (descending), then name:
    heavily shared and large subtrees are computed first. O(n + e log e).
    """
    n = graph.num_nodes
    post = xla_post_order(graph) if post_order is None else post_order
    extra = np.zeros(n, dtype=np.int64)
    total = np.zeros(n, dtype=np.int64)
    users = np.diff(graph.out_ptr)
    cumulative = 0
    for v in post.tolist():
        if graph.resident[v]:
            continue
        ops = np.unique(graph.inputs(v))
        b = int(graph.bytes[v])
        cumulative += b
        extra[v] = min(max(int(users[v]) - 1, 0) + int(extra[ops].sum()), n)
        total[v] = min(b + int(total[ops].sum()), cumulative)
    ids = np.asarray(graph.ids, dtype=object)
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[np.argsort(ids, kind="stable")] = np.arange(n)
    ptr, idx = concat_csr(graph.in_ptr, graph.in_idx, graph.ctrl_in_ptr, graph.ctrl_in_idx)
    rows = np.repeat(np.arange(n), np.diff(ptr))
    perm = np.lexsort((name_rank[idx], -total[idx], -extra[idx], rows))
    idx = idx[perm]
    # a node both a data and a control input is listed twice; the DFS skips the repeat
    order = dfs_postorder(_sinks(graph), ptr, idx, n)
    assert order.shape[0] == n
    return order


# ---------------------------------------------------------------------------- Inductor
@numba.njit(**_JIT)
def _lpmf_kernel(n, pred_cnt, succ_ptr, succ_idx, in_ptr, in_idx, out_ptr, out_idx,
                 nbytes, temp, resident, order):
    """Inductor's least-peak-memory-first (`topological_sort_lpmf`).

    For each ready node: mem1 = live + its output (+ temp here) is the memory while it runs,
    and size - memory_to_free is the change after. Pick the node minimising
    (max(mem1, max_memory_so_far), size - memory_to_free, index): while some node fits under the
    peak so far, the one leaving the least memory, else the one raising the peak least.
    Resident tensors are a constant offset (never freed); outputs are never freed.
    O(n * ready + e * max consumers).
    """
    outdeg = np.empty(n, dtype=np.int64)
    live = np.int64(0)
    out_mem = np.int64(0)
    for u in range(n):
        outdeg[u] = out_ptr[u + 1] - out_ptr[u]
        if resident[u]:
            live += nbytes[u]
        elif outdeg[u] == 0:
            out_mem += nbytes[u]
            outdeg[u] = 1  # graph outputs keep an implicit use
    # Inductor starts its peak at max(freeable inputs, outputs); here no input is freeable and
    # the resident bytes are a constant offset on both
    max_mem = live + out_mem
    size = np.zeros(n, dtype=np.int64)
    to_free = np.zeros(n, dtype=np.int64)
    for v in range(n):
        if not resident[v]:
            size[v] = nbytes[v]
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if not resident[u] and outdeg[u] == 1:
                to_free[v] += nbytes[u]
    indeg = pred_cnt.copy()
    ready = np.empty(n, dtype=np.int32)
    cnt = 0
    for v in range(n):
        if indeg[v] == 0:
            ready[cnt] = v
            cnt += 1
    t = 0
    while cnt > 0:
        best = -1
        k1 = np.int64(0)
        k2 = np.int64(0)
        bv = 0
        for i in range(cnt):
            v = ready[i]
            a = max(live + size[v] + temp[v], max_mem)
            b = size[v] - to_free[v]
            if best < 0 or a < k1 or (a == k1 and (b < k2 or (b == k2 and v < bv))):
                best, k1, k2, bv = i, a, b, v
        v = bv
        cnt -= 1
        ready[best] = ready[cnt]
        order[t] = v
        t += 1
        live += size[v] + temp[v]
        if live > max_mem:
            max_mem = live
        live -= temp[v] + to_free[v]
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[cnt] = w
                cnt += 1
        for e in range(in_ptr[v], in_ptr[v + 1]):
            u = in_idx[e]
            if resident[u]:
                continue
            outdeg[u] -= 1
            if outdeg[u] == 1:
                for f in range(out_ptr[u], out_ptr[u + 1]):
                    to_free[out_idx[f]] += nbytes[u]
    return t


def lpmf_order(graph: Graph) -> np.ndarray:
    """int32[n]: Inductor's least-peak-memory-first order (see `_lpmf_kernel`)."""
    kg = kernel_graph(graph)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    t = _lpmf_kernel(kg.num_nodes, kg.pred_cnt, kg.succ_ptr, kg.succ_idx, kg.in_ptr, kg.in_idx,
                     kg.out_ptr, kg.out_idx, kg.nbytes, kg.temp, kg.resident, order)
    assert t == graph.num_nodes
    return order


def inductor_bfs_order(graph: Graph) -> np.ndarray:
    """int32[n]: Inductor's `topological_sort_bfs`, a FIFO order.

    A ready node's priority is the sorted list of the steps at which its predecessors ran; the
    lexicographically smallest runs next (ties to the lower index), so the node whose inputs are
    oldest goes first, which shortens the lives of the buffers created. O(e log n).
    """
    n = graph.num_nodes
    pred_ptr, pred_idx = graph.pred_ptr, graph.pred_idx
    succ_ptr, succ_idx = graph.succ_ptr, graph.succ_idx
    indeg = np.diff(pred_ptr).tolist()
    step = [0] * n
    heap = [((), v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, v = heapq.heappop(heap)
        step[v] = len(order)
        order.append(v)
        for w in succ_idx[succ_ptr[v]:succ_ptr[v + 1]].tolist():
            indeg[w] -= 1
            if indeg[w] == 0:
                prio = tuple(sorted(step[u] for u in pred_idx[pred_ptr[w]:pred_ptr[w + 1]].tolist()))
                heapq.heappush(heap, (prio, w))
    return np.asarray(order, dtype=np.int32)


def inductor_dfs_order(graph: Graph) -> np.ndarray:
    """int32[n]: Inductor's `topological_sort_dfs`.

    Each node's `size_with_reads` is its output bytes plus the bytes of the (freeable, i.e.
    non-resident) buffers it reads. Nodes are taken in ascending (size_with_reads, index) as DFS
    roots, and each visit first visits the node's predecessors in the same ascending order, then
    emits it: small nodes, and the small inputs of a node, come first. O(e log e).
    """
    n = graph.num_nodes
    nb = np.where(graph.resident, 0, graph.bytes)
    dst = np.repeat(np.arange(n), np.diff(graph.in_ptr))
    swr = nb.copy()
    np.add.at(swr, dst, nb[graph.in_idx])
    ptr, idx = graph.pred_ptr, graph.pred_idx
    rows = np.repeat(np.arange(n), np.diff(ptr))
    idx = idx[np.lexsort((idx, swr[idx], rows))]
    roots = np.lexsort((np.arange(n), swr))
    order = dfs_postorder(roots, ptr, idx, n)
    assert order.shape[0] == n
    return order


# ---------------------------------------------------------------------------- solvers
def _best_order(graph: Graph, devices: int, placement: np.ndarray, orders: dict, method: str,
                t0: float, info: dict) -> Solution:
    """Score every candidate order with the simulator; keep the first lowest (dict order)."""
    peaks = {name: simulate(graph, placement, order, devices).peak_bytes for name, order in orders.items()}
    chosen = min(peaks, key=peaks.__getitem__)
    info = dict(info, chosen=chosen, peaks=peaks)
    return make_solution(graph, placement, orders[chosen], devices, method=method,
                         evaluations=len(orders), seconds=time.perf_counter() - t0, info=info)


def _placement_for(graph: Graph, devices: int, seed: int) -> tuple[np.ndarray, dict]:
    if devices == 1:
        return np.zeros(graph.num_nodes, dtype=np.int32), {}
    return metis_placement(graph, devices, seed), {
        "placement": "gp-dfs METIS placement; the compiler heuristics order one device"}


def solve_xla(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0, **options) -> Solution:
    """XLA's own schedule, `graph.meta["xla_order"]` (node ids), on device 0.

    A single-device compiler runs everything on one device, so for d > 1 every node still goes
    to device 0 (info says so). Raises ValueError when the graph carries no usable xla_order.
    """
    _no_options("xla", options)
    _check_devices(devices)
    t0 = time.perf_counter()
    ids = graph.meta.get("xla_order")
    if not ids:
        raise ValueError(f"graph '{graph.name}' has no meta['xla_order'] (not from a scheduled HLO module)")
    index = graph.index
    missing = [nid for nid in ids if nid not in index]
    if missing or len(ids) != graph.num_nodes or len(set(ids)) != graph.num_nodes:
        raise ValueError(f"graph '{graph.name}': meta['xla_order'] is not a permutation of its "
                         f"{graph.num_nodes} nodes ({len(ids)} entries, {len(missing)} unknown)")
    order = np.fromiter((index[nid] for nid in ids), dtype=np.int32, count=graph.num_nodes)
    info = {"source": "meta['xla_order']"}
    if devices > 1:
        info["placement"] = f"all nodes on device 0 of {devices}: XLA schedules one device"
    return make_solution(graph, np.zeros(graph.num_nodes, dtype=np.int32), order, devices,
                         method="xla", evaluations=1, seconds=time.perf_counter() - t0, info=info)


def solve_xla_heuristics(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0,
                         **options) -> Solution:
    """The lowest simulated peak of XLA's list, DFS and post-order schedulers.

    As XLA's DefaultMemoryScheduler: ties prefer list, then DFS, then post-order. For d > 1 the
    placement is gp-dfs's METIS partition (`seed` feeds METIS) and the orders are scored on it.
    Three simulations; O(n * ready + e log e).
    """
    _no_options("xla-heuristics", options)
    _check_devices(devices)
    t0 = time.perf_counter()
    placement, info = _placement_for(graph, devices, seed)
    post = xla_post_order(graph)
    orders = {"list": xla_list_order(graph), "dfs": xla_dfs_order(graph, post), "post_order": post}
    return _best_order(graph, devices, placement, orders, "xla-heuristics", t0, info)


def solve_inductor_heuristics(graph: Graph, devices: int, *, time_limit_s=None, seed: int = 0,
                              **options) -> Solution:
    """The lowest simulated peak of Inductor's `reorder_for_peak_memory` candidates.

    Candidates, in Inductor's order (first wins a tie): the original order (Kahn by node index,
    the file order of a topologically listed graph), least-peak-memory-first, BFS, DFS. For d > 1
    the placement is gp-dfs's METIS partition. Four simulations; O(n * ready + e log e).
    """
    _no_options("inductor-heuristics", options)
    _check_devices(devices)
    t0 = time.perf_counter()
    placement, info = _placement_for(graph, devices, seed)
    orders = {"baseline": graph.topological_order().astype(np.int32), "lpmf": lpmf_order(graph),
              "bfs": inductor_bfs_order(graph), "dfs": inductor_dfs_order(graph)}
    return _best_order(graph, devices, placement, orders, "inductor-heuristics", t0, info)


def _no_options(method: str, options: dict) -> None:
    if options:
        raise TypeError(f"{method}: unknown options {sorted(options)}")
