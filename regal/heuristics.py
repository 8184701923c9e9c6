"""Cheap heuristic schedules: compiler orders, a greedy list scheduler, a random floor.

Every solution here costs no search, so the search seeds its population with them and the
local search starts from the best (`heuristic_solutions`).

- XLA's three memory schedulers (list, DFS, post-order), re-implemented from
  `xla/hlo/transforms/simplifiers/hlo_memory_scheduler.cc`'s descriptions: `xla_list_order`,
  `xla_dfs_order`, `xla_post_order`.
- PyTorch Inductor's peak-memory reorderings (`torch/_inductor/memory.py`): `lpmf_order`
  (least-peak-memory-first), `inductor_bfs_order`, `inductor_dfs_order`.
- `greedy_schedule`: a greedy list scheduler that chooses node and device together on a running
  memory state (what a simple hand-written scheduler would do), with SPEC.md's in-place reuse.
- `random_solution`: uniform placement and a random topological order (one random chromosome).
- `pack_residents` re-homes a schedule's resident tensors to the devices where they cost least,
  priced on its step trace; `packed_solutions` applies it to each compiler order computed on
  fewer devices than there are (one, for the flagship's seeds): a parameter server's layout.
  These cost one simulation each, which their callers count.

The compiler heuristics rank nodes as the compilers do, without the in-place reuse of a graph's
`reuse` field (XLA's and Inductor's list schedulers do not model it either); every solution is
scored by the simulator, which does. The compilers schedule one device: their orders go with
gp-dfs's METIS placement
(`regal.structure.metis_placement`, Paliwal et al., ICLR 2020's GP + DFS). Resident nodes are
XLA's parameters and constants (ignored by its heuristics, as there) and Inductor's
non-freeable inputs. The loops that scan a ready list are Numba kernels in `regal.kernels.orders`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np

from regal.kernels import greedy as _greedy
from regal.kernels import decode as _kernels
from regal.kernels import orders as _orders
from regal.kernels.orders import SCALAR_BYTES
from regal._stop import Deadline, Stopped, as_deadline, interruptible
from regal.decode import order_by_priority
from regal.graph import Graph, check_devices
from regal.simulate import kernel_graph, memory_trace
from regal.structure import concat_csr, dfs_order, dfs_postorder, metis_placement

__all__ = ["xla_list_order", "xla_dfs_order", "xla_post_order", "lpmf_order", "inductor_bfs_order",
           "inductor_dfs_order", "greedy_schedule", "random_solution", "pack_residents", "heuristic_solutions",
           "packed_solutions", "fallback_solution",
           "START_NAMES", "SCALAR_BYTES", "GREEDY_WINDOW"]

#: How many ready nodes the greedy scheduler scores at a step: the ones that became ready last
#: (a depth-first leaning, which frees inputs sooner). Scoring every ready node made it quadratic
#: on wide graphs (0.75 / 3.1 / 12.4 s at 12.5K / 25K / 50K nodes without edges); with the window
#: it is linear (1.3-1.8 s at 100K nodes without edges, d = 1-4; 2.0 s on a 60K-node Transformer
#: training step, d = 2). The widest greedy schedule of a shipped graph has 1,293 ready nodes at
#: a step (a Transformer decoder's training step), so every shipped graph keeps the schedule the
#: full scan gave.
GREEDY_WINDOW = 2048

#: Under a deadline, the greedy start may take at most this share of the time left after the
#: other starts (`_solutions`): the rest goes to the search (its first generation decodes the
#: seeds).
GREEDY_SHARE = 0.5

#: How long a kernel run by `_until` runs before its progress is extrapolated (its first steps
#: include loading and warm caches).
UNTIL_SETTLE_S = 0.2

#: The heuristic starts, in the order they are evaluated (the first wins ties): gp-dfs, greedy,
#: then the compiler orders on the METIS placement. "random" is accepted as well, never implied.
START_NAMES = ("gp-dfs", "greedy", "xla-list", "xla-dfs", "xla-post-order", "inductor-lpmf",
               "inductor-bfs", "inductor-dfs")


# ---------------------------------------------------------------------------- XLA
def xla_list_order(graph: Graph) -> np.ndarray:
    """int32[n]: XLA's list scheduler (`_orders.xla_list_order`); control edges are honored."""
    kg = kernel_graph(graph)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    t = _orders.xla_list_order(kg, SCALAR_BYTES, order)
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
    _orders.xla_dfs_weights(np.ascontiguousarray(post, dtype=np.int64), n, np.ascontiguousarray(graph.resident),
                             np.ascontiguousarray(graph.bytes, dtype=np.int64), np.diff(graph.out_ptr).astype(np.int64),
                             np.ascontiguousarray(graph.in_ptr, dtype=np.int64),
                             np.ascontiguousarray(graph.in_idx, dtype=np.int64), extra, total)
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
def lpmf_order(graph: Graph) -> np.ndarray:
    """int32[n]: Inductor's least-peak-memory-first order (`_orders.lpmf_order`)."""
    kg = kernel_graph(graph)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    t = _orders.lpmf_order(kg, order)
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


# ---------------------------------------------------------------------------- greedy, random
def greedy_schedule(graph: Graph, devices: int, window: int = GREEDY_WINDOW,
                    deadline: Deadline | float | None = None,
                    finish_by: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(placement int32[n], order int32[n]): greedy list scheduling of nodes and devices together.

    Resident nodes go first in the order. Then, at every step, every (ready node v, device k)
    pair is scored on the current state: the copies v needs on k, its output and temp give the
    memory while v runs; inputs whose last consumer is v are freed afterwards. Each ready node
    takes its best device by (peak of all devices after it, net bytes it adds, memory on k while
    it runs, device): keep the peak; among devices that do, add the least memory, which puts a
    node where its inputs live unless that would raise the peak when another device would not;
    then the emptier device. Among the ready nodes, the one run next minimises the same key
    (then node index) with the bytes of the resident tensors it homes left out (below).
    A resident tensor lives from the start on its home device. With one device that is device 0;
    with more it is homed on the device of its first reader (it then counts on that device from
    the start) or, if nobody reads it, on the lowest-peak device at the end. Its bytes are paid
    wherever and whenever it is first read, so they steer the device, never the node's turn.
    The running state frees a tensor, with all its copies, when its last consumer has run, since
    the devices of consumers not yet placed are unknown; the exact peak is the simulator's. A node
    with a `reuse` field runs with the bytes it would take over on k subtracted (SPEC.md section
    3: inputs homed on k whose last consumer it is, in its preference order, while they fit).
    On a wide graph only the `window` (default `GREEDY_WINDOW`) nodes that became ready last
    are scored at a step (every ready node while there are no more than that). Deterministic. O(n * window * d *
    in-degree): linear in the nodes, with a large factor (6-9 s at 300K nodes, d = 2, 2 shared cores). deadline:
    `Stopped` within a few milliseconds once it expires; the kernel stops too (`_until`), so
    nothing goes on computing in the background. finish_by (a `time.perf_counter()` value, with
    a deadline only): `Stopped` as well once its progress so far projects its end past that.
    """
    devices = check_devices(devices)
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    kg = kernel_graph(graph)
    placement = np.empty(graph.num_nodes, dtype=np.int32)
    order = np.empty(graph.num_nodes, dtype=np.int32)
    stop = np.zeros(2, dtype=np.int64)
    t = _until(deadline, stop, _greedy.greedy_schedule, kg, devices, int(window), placement, order, stop,
               total=graph.num_nodes, finish_by=finish_by)
    assert t == graph.num_nodes
    return placement, order


def _until(deadline, stop: np.ndarray, kernel, *args, total: int = 0, finish_by: float | None = None):
    """`kernel(*args)`, whose loop returns early once stop[0] (`stop` is one of `args`) is
    nonzero: run in a helper thread (the kernels release the GIL) while this one polls
    `deadline`; once it expires, stop[0] is set, the kernel returns within a step and `Stopped`
    is raised. Unlike `interruptible`, no thread is left computing in the background, taking a
    core from the search that follows (issue 36). With `finish_by`, the kernel's progress
    (stop[1] of `total` done) is extrapolated at every poll, after the first UNTIL_SETTLE_S: it
    is stopped as soon as the rate so far would not finish by then."""
    if deadline is None:
        return kernel(*args)
    deadline = as_deadline(deadline)
    deadline.check()
    if finish_by is not None and time.perf_counter() >= finish_by:
        raise Stopped("time_limit")
    box = []

    def work():
        try:
            box.append((True, kernel(*args)))
        except BaseException as e:  # noqa: BLE001  (handed to the caller's thread)
            box.append((False, e))

    start = time.perf_counter()
    worker = threading.Thread(target=work, name="regal-until", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.01)
        if worker.is_alive() and (deadline.expired() or _late(start, stop, total, finish_by)):
            stop[0] = 1
            worker.join()
            raise Stopped(deadline.reason or "time_limit")
    ok, value = box[0]
    if ok:
        return value
    raise value


def _late(start: float, stop: np.ndarray, total: int, finish_by: float | None) -> bool:
    """Whether a kernel that has done stop[1] of `total` since `start` will miss `finish_by` at
    the rate so far."""
    if finish_by is None:
        return False
    now = time.perf_counter()
    if now >= finish_by:
        return True
    done = int(stop[1])
    if now - start < UNTIL_SETTLE_S or done <= 0:
        return False
    return now + (now - start) * (total - done) / done > finish_by


def random_solution(graph: Graph, devices: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(placement int32[n], order int32[n]): uniform placement, Kahn on uniform priorities.

    The same as decoding one uniform random chromosome (SPEC.md section 5); deterministic per
    seed. O(n log n + e).
    """
    devices = check_devices(devices)
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    placement = rng.integers(0, devices, size=n).astype(np.int32)
    order = order_by_priority(graph, rng.random(n))
    return placement, order


def pack_residents(graph: Graph, devices: int, placement, order) -> np.ndarray:
    """placement int32[n]: `placement` with resident tensors re-homed to lower the peak; the order
    stays. Largest first, each resident tensor moves to the device where (max device peak, sum of
    device peaks) falls most, if it falls: its home holds it at every step, any other device a
    copy from its first consumer there to its last (SPEC.md section 3), so a parameter homed on a
    device with room costs the device that reads it only its reader's steps. Computed on the
    schedule's step trace, not by search: one simulation, then O(d sqrt(n)) per resident tensor
    (`regal.kernels.decode.pack_residents`). The inputs are not modified.
    """
    devices = check_devices(devices)
    placement = np.ascontiguousarray(placement, dtype=np.int32).copy()
    candidates = pack_candidates(graph)
    if devices == 1 or candidates.size == 0:
        return placement
    _, trace = memory_trace(graph, placement, order, devices)
    pack_on_trace(kernel_graph(graph), candidates, placement, np.ascontiguousarray(order, dtype=np.int32), trace)
    return placement


def pack_candidates(graph: Graph) -> np.ndarray:
    """int64[*]: the resident nodes with bytes, largest first (ties by id): what
    `pack_residents` re-homes, in its order."""
    candidates = np.flatnonzero(graph.resident & (graph.bytes > 0))
    return candidates[np.argsort(-graph.bytes[candidates], kind="stable")].astype(np.int64)


def pack_on_trace(kg, candidates: np.ndarray, placement: np.ndarray, order: np.ndarray, trace: np.ndarray) -> int:
    """`pack_residents` on a schedule whose step trace (int64[n, d], `simulate_peak`'s) is given:
    re-homes `candidates` in `placement` (int32[n], in place) and brings `trace` up to date;
    returns how many moved. No simulation."""
    pos = np.empty(kg.num_nodes, dtype=np.int64)
    pos[order] = np.arange(kg.num_nodes)
    return int(_kernels.pack_residents(kg, trace, pos, placement, candidates,
                                       np.empty((trace.shape[1], 2), dtype=np.int64)))


# ---------------------------------------------------------------------------- starts
_COMPILER_ORDERS = {"gp-dfs": dfs_order, "xla-list": xla_list_order, "xla-dfs": xla_dfs_order,
                    "xla-post-order": xla_post_order, "inductor-lpmf": lpmf_order,
                    "inductor-bfs": inductor_bfs_order, "inductor-dfs": inductor_dfs_order}


def _compiler_order(graph: Graph, name: str) -> np.ndarray:
    """int32[n]: the compiler order `name` of `graph`, computed once per graph and shared (the
    heuristic starts and the packed starts use the same orders): callers copy before changing."""
    return graph.cached(f"order:{name}", lambda: np.ascontiguousarray(_COMPILER_ORDERS[name](graph), dtype=np.int32))


def heuristic_solutions(graph: Graph, devices: int, seed: int, names: Sequence[str] = START_NAMES,
                        deadline: Deadline | float | None = None) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(name, placement int32[n], order int32[n]) of each heuristic in `names`, lazily, in order.

    names: from `START_NAMES` or "random". The orders of gp-dfs and the compilers go with one
    METIS placement (`seed` feeds METIS), computed when first needed; greedy and random bring
    their own. Every yielded array is a fresh copy the caller may modify. A caller that stops
    iterating pays for no further heuristic. deadline (`regal._stop.Deadline`, or an absolute
    `time.perf_counter()` value): once it expires no further heuristic is computed, and the one
    being computed is left behind within a poll interval (`regal._stop.interruptible`); under a
    deadline the greedy is computed last, within a share of the time left, and the starts are
    yielded once all are computed, still in `names` order (`_solutions`).
    """
    devices = check_devices(devices)
    unknown = [name for name in names if name not in START_NAMES + ("random",)]
    if unknown:
        raise ValueError(f"unknown heuristic {unknown[0]!r}; known: random, {', '.join(START_NAMES)}")
    return _solutions(graph, devices, seed, tuple(names), None if deadline is None else as_deadline(deadline))


def packed_solutions(graph: Graph, devices: int, seed: int, compute_devices: Sequence[int] | None = None,
                     deadline: Deadline | float | None = None) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(name, placement int32[n], order int32[n]) of the "computes on fewer devices" starts, lazily.

    For each k of `compute_devices` (default 1 .. d - 1; k = d packs the METIS starts of
    `heuristic_solutions` as they are) and each compiler order (`_COMPILER_ORDERS`): the
    operations on k devices (all on device 0 for k = 1, METIS's k parts otherwise, `seed`
    feeding METIS), then the resident tensors re-homed across all d devices (`pack_residents`),
    so that the devices that compute hold copies of a parameter only while it is read and the
    others keep the rest. The shape of a parameter server (or of ZeRO's sharded weights): on
    forward graphs of models whose weights outweigh their activations it starts far below any
    METIS split (ResNet-50 from ONNX, d = 2: 82.5 MB against 96.8 MB for METIS + DFS packed the
    same way). Names are "ORDER/compute-on-K". Nothing for d = 1 or a graph without resident
    tensors; an order that repeats an earlier one is skipped. Each start costs one simulation
    (the step trace that `pack_residents` prices on): the caller counts it. deadline: as for
    `heuristic_solutions`.
    """
    devices = check_devices(devices)
    if devices == 1 or pack_candidates(graph).size == 0:
        return
    deadline = None if deadline is None else as_deadline(deadline)
    orders, seen = {}, set()
    try:
        for name in _COMPILER_ORDERS:
            order = interruptible(_compiler_order, deadline, graph, name)
            if order.tobytes() not in seen:
                seen.add(order.tobytes())
                orders[name] = order
        for k in (range(1, devices) if compute_devices is None else compute_devices):
            if not 1 <= k <= devices:
                raise ValueError(f"compute_devices: {k} is not a device count from 1 to {devices}")
            if deadline is not None:
                deadline.check()
            base = metis_placement(graph, k, seed)   # not in a thread: it redirects the C stdout
            for name, order in orders.items():
                yield (f"{name}/compute-on-{k}", interruptible(pack_residents, deadline, graph, devices, base, order),
                       order.copy())
    except Stopped:
        return


def fallback_solution(graph: Graph) -> tuple[str, np.ndarray, np.ndarray]:
    """("xla-post-order/device-0", placement, order): every node on device 0 in XLA's post-order,
    O(n + e) and never interrupted: what a search stopped before its first start has to give."""
    return ("xla-post-order/device-0", np.zeros(graph.num_nodes, dtype=np.int32),
            np.ascontiguousarray(_compiler_order(graph, "xla-post-order"), dtype=np.int32).copy())


def _solutions(graph: Graph, devices: int, seed: int, names: tuple[str, ...], deadline: Deadline | None):
    """The starts of `names`, in that order. Under a deadline the greedy, whose steps each score
    up to GREEDY_WINDOW ready nodes (20 s at 1M nodes, d = 2, where every other start takes
    0.1-3 s), is computed after the others, with at most GREEDY_SHARE of the time then left: it
    gives up as soon as its progress projects it past that (issue 36: before, it took the whole
    limit on 300K+ nodes and the search started from METIS + DFS alone)."""
    if deadline is None or "greedy" not in names:
        yield from _computed(graph, devices, seed, names, deadline)
        return
    rest = tuple(name for name in names if name != "greedy")
    done = {name: start for name, *start in _computed(graph, devices, seed, rest, deadline)}
    if len(done) == len(rest) and not deadline.expired():
        left = deadline.remaining_s()   # None: a deadline without a time limit (stop requests only)
        finish_by = None if left is None else time.perf_counter() + GREEDY_SHARE * left
        try:
            done["greedy"] = _copies(*greedy_schedule(graph, devices, deadline=deadline, finish_by=finish_by))
        except Stopped:  # out of time, or it would have been
            pass
    yield from ((name, *done[name]) for name in names if name in done)


def _computed(graph: Graph, devices: int, seed: int, names: tuple[str, ...], deadline: Deadline | None):
    """(name, placement, order) of each of `names`, lazily, until the deadline."""
    metis = None
    for name in names:
        try:
            if name == "greedy":
                placement, order = greedy_schedule(graph, devices, deadline=deadline)
            elif name == "random":
                placement, order = interruptible(random_solution, deadline, graph, devices, seed)
            else:
                if metis is None:  # called here, not in a thread: it redirects the C stdout (0.1 s at 60K nodes)
                    if deadline is not None:
                        deadline.check()
                    metis = metis_placement(graph, devices, seed)
                placement, order = metis, interruptible(_compiler_order, deadline, graph, name)
        except Stopped:
            return
        yield (name, *_copies(placement, order))


def _copies(placement, order) -> tuple[np.ndarray, np.ndarray]:
    return (np.ascontiguousarray(placement, dtype=np.int32).copy(),
            np.ascontiguousarray(order, dtype=np.int32).copy())
