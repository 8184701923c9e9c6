"""A schedule's buffers and their addresses: the memory plan of a placement and order.

SPEC section 3 counts live bytes; a runtime with one static arena per device needs an address
for each of them. `buffers` lists, per device, every buffer the section keeps alive, with its
life in steps (positions in the global order; step t is the time [t, t + 1), half-open, as in
MiniMalloc's CSV):

- **home**: a node's output on its own device, from its step to the step that frees its home
  copy (section 3, step 3: its last consumer there, or the arrival of its last copy elsewhere),
  that step included; a resident node from before the first step, and a graph output (marked or
  without consumers), to the end;
- **copy**: a node's copy on another device, from its first consumer there to its last;
- **temp**: a node's `temp_bytes`, during its own step.

*Take-over* (`reuse`): when `v` takes over one input `u` of its own size at the step that frees
`u` (section 3, step 2), `v` writes its output in `u`'s buffer: the two are one block, `u`'s
life continued by `v`'s, one offset for both (a chain of such take-overs is one block). A
take-over of a smaller input, or of several, cannot keep one contiguous buffer for `v`; the
plan then gives `v` a buffer of its own and keeps the inputs to the end of the step, so its
live bytes at that step exceed section 3's by the bytes taken (the graphs of the data set have
few: 88 of 40,607 nodes with a `reuse` list in the test splits list an input of another size).
Without those, the most bytes live at once on a device (the plan's live-bytes bound) equals its
section 3 peak.

`plan(graph, placement, order, devices)` packs each device's buffers (`regal.packing.pack`) into
a `MemoryPlan`; `plan_json` / `check_plan_json` write and check the optional `memory_plan` field
of `regal-solution/1` (SPEC section 2).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np

from regal._takeover import takeovers
from regal.graph import Graph
from regal.packing import MAX_VALUE, Instance, PackingError, check, pack
from regal.simulate import check_schedule

__all__ = ["Buffers", "MemoryPlan", "buffers", "plan", "arena_bytes", "plan_json", "check_plan_json",
           "PLAN_KINDS"]

#: The kinds of buffer a plan holds (`Buffers.kind`).
PLAN_KINDS = ("home", "copy", "temp")


class Buffers(NamedTuple):
    """The buffers of a schedule, all devices together (b buffers): int64[b] arrays.
    node: the node whose tensor it holds (a block's first node); kind: index into PLAN_KINDS;
    device; lower, upper: its life in steps, half-open; size: bytes. block_of: int64[n], for
    every node with a home buffer, the index of that buffer (-1 without one: zero bytes)."""
    node: np.ndarray
    kind: np.ndarray
    device: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    size: np.ndarray
    block_of: np.ndarray

    def instance(self, graph: Graph, k: int) -> tuple[Instance, np.ndarray]:
        """Device k's buffers as a packing instance (ids "node", "node@copy", "node@temp") and
        their indices into these arrays."""
        sel = np.flatnonzero(self.device == k)
        return Instance(_Ids(graph.ids, self.node[sel], self.kind[sel]), self.lower[sel], self.upper[sel],
                        self.size[sel]), sel


class _Ids:
    """A buffer's id ("node", "node@copy", "node@temp"), made when asked for (error messages)."""

    def __init__(self, ids, node, kind):
        self.ids, self.node, self.kind = ids, node, kind

    def __len__(self):
        return self.node.shape[0]

    def __getitem__(self, i):
        return self.ids[self.node[i]] + ("", "@copy", "@temp")[self.kind[i]]


def buffers(graph: Graph, placement, order, devices: int) -> Buffers:
    """Every buffer section 3 keeps alive for this schedule (see the module docstring)."""
    placement, order = check_schedule(graph, placement, order, devices)
    n = graph.num_nodes
    p = placement.astype(np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    nbytes = graph.bytes.astype(np.int64)
    resident = graph.resident
    kept = graph.kept
    src = np.repeat(np.arange(n), np.diff(graph.out_ptr))   # each data edge: producer -> consumer
    dst = graph.out_idx.astype(np.int64)
    big = np.iinfo(np.int64).max
    first = np.full((n, devices), big, dtype=np.int64)     # first / last consumer step per device
    last = np.full((n, devices), -1, dtype=np.int64)
    np.minimum.at(first, (src, p[dst]), pos[dst])
    np.maximum.at(last, (src, p[dst]), pos[dst])
    home_last = last[np.arange(n), p]
    remote_first = np.where(np.arange(devices)[None, :] == p[:, None], -1, np.where(first == big, -1, first))
    end = np.maximum(np.maximum(home_last, remote_first.max(axis=1)), pos)  # the step that frees the home copy
    upper = np.where(kept, n, end + 1)
    lower = np.where(resident, 0, pos)

    # take-overs that keep one buffer: v's first input taken over (section 3, step 2: the one
    # rule, `regal._takeover.takeovers`) that has bytes, when it has v's size
    owner = np.repeat(np.arange(n), np.diff(graph.reuse_ptr))
    cand = graph.reuse_idx.astype(np.int64)
    ok = takeovers(graph, placement, order) & (nbytes[cand] > 0)
    first_entry = np.full(n, big, dtype=np.int64)
    np.minimum.at(first_entry, owner[ok], np.flatnonzero(ok))
    takers = np.flatnonzero(first_entry < big)
    taken = cand[first_entry[takers]]
    same = nbytes[taken] == nbytes[takers]
    parent = np.arange(n)
    parent[takers[same]] = taken[same]
    while True:  # each node's block root: the first node of its chain
        nxt = parent[parent]
        if np.array_equal(nxt, parent):
            break
        parent = nxt
    has = nbytes > 0
    roots = np.flatnonzero(has & (parent == np.arange(n)))
    block_upper = np.zeros(n, dtype=np.int64)
    np.maximum.at(block_upper, parent[has], upper[has])
    block_of = np.full(n, -1, dtype=np.int64)
    block_of[roots] = np.arange(roots.shape[0])
    block_of[has] = block_of[parent[has]]

    cu, cq = np.nonzero((last >= 0) & (np.arange(devices)[None, :] != p[:, None]) & (nbytes[:, None] > 0))
    tv = np.flatnonzero(~resident & (graph.temp_bytes > 0))
    cat = np.concatenate
    return Buffers(
        node=cat([roots, cu, tv]).astype(np.int64),
        kind=cat([np.zeros(roots.shape[0]), np.ones(cu.shape[0]), np.full(tv.shape[0], 2)]).astype(np.int64),
        device=cat([p[roots], cq, p[tv]]).astype(np.int64),
        lower=cat([lower[roots], first[cu, cq], pos[tv]]).astype(np.int64),
        upper=cat([block_upper[roots], last[cu, cq] + 1, pos[tv] + 1]).astype(np.int64),
        size=cat([nbytes[roots], nbytes[cu], graph.temp_bytes[tv]]).astype(np.int64),
        block_of=block_of)


class MemoryPlan(NamedTuple):
    """A checked memory plan. offsets: int64[b], one per buffer of `buffers`; per device,
    int64[d] / bool[d]: arena_bytes (max offset + size), bound_bytes (the most bytes its buffers
    hold at once, a lower bound on its arena), optimal (arena proven smallest for these buffers);
    method: the packer's per device; seconds: wall time."""
    buffers: Buffers
    offsets: np.ndarray
    arena_bytes: np.ndarray
    bound_bytes: np.ndarray
    optimal: np.ndarray
    methods: tuple
    seconds: float


def plan(graph: Graph, placement, order, devices: int, time_limit_s: float | None = 2.0,
         quick: bool = False, deadline=None) -> MemoryPlan:
    """Pack every device's buffers (`regal.packing.pack`, `time_limit_s` per device; 0: the fast
    heuristic alone; quick: two greedy placements alone), each packing checked. deadline: a
    `regal._stop.Deadline` that cuts every device's packing short (`pack`: still valid)."""
    import time

    from regal._args import check_seconds
    check_seconds(time_limit_s)
    t0 = time.perf_counter()
    bufs = buffers(graph, placement, order, devices)
    offsets = np.zeros(bufs.size.shape[0], dtype=np.int64)
    arena, bound = np.zeros(devices, dtype=np.int64), np.zeros(devices, dtype=np.int64)
    optimal, methods = np.zeros(devices, dtype=bool), []
    for k in range(devices):
        inst, sel = bufs.instance(graph, k)
        res = pack(inst, time_limit_s=time_limit_s, quick=quick, deadline=deadline)
        offsets[sel] = res.offsets
        arena[k], bound[k], optimal[k] = res.packed_bytes, res.bound_bytes, res.optimal
        methods.append(res.method)
    return MemoryPlan(bufs, offsets, arena, bound, optimal, tuple(methods), time.perf_counter() - t0)


def arena_bytes(graph: Graph, placement, order, devices: int) -> int:
    """The largest device arena of the quick heuristic's plan (`plan(..., quick=True)`): the
    packing-aware objective's score."""
    return int(plan(graph, placement, order, devices, time_limit_s=0.0, quick=True).arena_bytes.max())


# ---------------------------------------------------------------- the solution file's field
def plan_json(graph: Graph, mp: MemoryPlan) -> dict:
    """The `memory_plan` field of `regal-solution/1` (SPEC section 2)."""
    b = mp.buffers
    doc = {"arena_bytes": [int(x) for x in mp.arena_bytes], "offsets": {}, "copy_offsets": {}, "temp_offsets": {}}
    ids = graph.ids
    for v in np.flatnonzero(b.block_of >= 0).tolist():
        doc["offsets"][ids[v]] = int(mp.offsets[b.block_of[v]])
    for i in np.flatnonzero(b.kind == 1).tolist():
        doc["copy_offsets"].setdefault(ids[b.node[i]], {})[str(int(b.device[i]))] = int(mp.offsets[i])
    for i in np.flatnonzero(b.kind == 2).tolist():
        doc["temp_offsets"][ids[b.node[i]]] = int(mp.offsets[i])
    return {k: v for k, v in doc.items() if v or k in ("arena_bytes", "offsets")}


def check_plan_json(graph: Graph, placement, order, devices: int, doc) -> np.ndarray:
    """Check a `memory_plan` field against the schedule: an offset for every buffer, a taken-over
    input's offset shared by the node that takes it, no two live buffers overlapping, the claimed
    arenas the packed ones. Returns arena_bytes: int64[d]; PackingError naming the node."""
    def fail(msg):
        raise PackingError(f"memory_plan: {msg}")

    if not isinstance(doc, Mapping):
        fail("must be an object")
    b = buffers(graph, placement, order, devices)
    offsets = np.full(b.size.shape[0], -1, dtype=np.int64)
    ids = graph.ids
    given = {key: doc.get(key) or {} for key in ("offsets", "copy_offsets", "temp_offsets")}
    for key, val in given.items():
        if not isinstance(val, Mapping):
            fail(f"'{key}' must be an object")
    _names_only_buffers(graph, b, devices, given, fail)
    claimed = doc.get("arena_bytes")
    if claimed is not None and (not isinstance(claimed, list) or len(claimed) != devices):
        fail(f"claims arena_bytes {claimed!r}: expected a list of {devices} (one per device)")

    def number(x, what):
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            fail(f"{what} must be a non-negative integer, got {x!r}")
        if x > MAX_VALUE:
            fail(f"{what} is {x}, over 2**62, the largest offset a plan holds exactly")
        return x

    for v in np.flatnonzero(b.block_of >= 0).tolist():
        if ids[v] not in given["offsets"]:
            fail(f"node '{ids[v]}' has no offset")
        o = number(given["offsets"][ids[v]], f"the offset of node '{ids[v]}'")
        blk = b.block_of[v]
        if offsets[blk] >= 0 and offsets[blk] != o:
            fail(f"node '{ids[v]}' takes over the buffer of node '{ids[b.node[blk]]}' (SPEC section 3) and "
                 f"must share its offset {offsets[blk]}, not {o}")
        offsets[blk] = o
    for i in np.flatnonzero(b.kind > 0).tolist():
        v, key = ids[b.node[i]], ("copy_offsets" if b.kind[i] == 1 else "temp_offsets")
        entry = given[key].get(v)
        if b.kind[i] == 1:
            entry = entry.get(str(int(b.device[i]))) if isinstance(entry, Mapping) else None
        if entry is None:
            fail(f"node '{v}' has no {'copy offset on device ' + str(int(b.device[i])) if b.kind[i] == 1 else 'temp offset'}")
        offsets[i] = number(entry, f"the {key[:-1].replace('_', ' ')} of node '{v}'")
    arenas = np.zeros(devices, dtype=np.int64)
    for k in range(devices):
        inst, sel = b.instance(graph, k)
        try:
            arenas[k] = check(inst, offsets[sel])
        except PackingError as e:
            fail(f"device {k}: {e}")
    if claimed is not None and [x if isinstance(x, int) and not isinstance(x, bool) else None
                                for x in claimed] != arenas.tolist():
        fail(f"claims arena_bytes {claimed!r} but the offsets give {arenas.tolist()}")
    return arenas


def _names_only_buffers(graph: Graph, b: Buffers, devices: int, given: dict, fail) -> None:
    """Every node, device and offset the plan names exists: an offset for a node of the graph
    with a home buffer (bytes > 0), a copy offset for a device that holds a copy of that node, a
    temp offset for a node with temp bytes (else `fail` naming it)."""
    index = {v: i for i, v in enumerate(graph.ids)}
    has_copy = {(int(b.node[i]), int(b.device[i])) for i in np.flatnonzero(b.kind == 1).tolist()}
    has_temp = {int(b.node[i]) for i in np.flatnonzero(b.kind == 2).tolist()}
    for key, entries in given.items():
        for v, entry in entries.items():
            if v not in index:
                fail(f"'{key}' names node {v!r}, which the graph lacks")
            i = index[v]
            if key == "offsets" and b.block_of[i] < 0:
                fail(f"'offsets' gives node {v!r} an offset, but it has no buffer (0 bytes)")
            if key == "temp_offsets" and i not in has_temp:
                fail(f"'temp_offsets' gives node {v!r} a temp offset, but it holds no temp bytes")
            if key != "copy_offsets":
                continue
            if not isinstance(entry, Mapping):
                fail(f"the copy offsets of node {v!r} must be an object of device -> offset")
            for k in entry:
                if not (isinstance(k, str) and k.isascii() and k.isdigit() and str(int(k)) == k and int(k) < devices):
                    fail(f"'copy_offsets' of node {v!r} names device {k!r}: the plan has devices 0 to {devices - 1}")
                if (i, int(k)) not in has_copy:
                    fail(f"'copy_offsets' gives node {v!r} a copy on device {k}, which the schedule does not make")
