"""Recomputation (SPEC.md section 3b): schedules that run a node more than once.

A schedule's `order` may list a non-resident node that is not a graph output again: each entry
is an *instance*, which reads the latest instance of each input before it, so a recomputation
frees the first instance after its early readers and makes the value again just before the
late ones. The peak is section 3 on the instance graph (`regal._remat.instance_peak`); a
sequence without repeats is an order, scored as before.

- `check_sequence`: validates a sequence (every node at least once, a kept node once, each
  instance after an instance of each input, each instance read) with one-line errors.
- `op_costs`: the costs recomputation is charged (the graph's `cost`, or the documented stand-in
  when it has none: the bytes one run reads and writes).
- `recompute_stats`: how many recomputations and their extra cost, as `--json` reports it.
- `instance_graph`: the instance graph as a `Graph` (the one construction, from arrays; the
  sequence checked unless `checked=True`), for what reads a schedule as one without repeats:
  the timed model (`regal.timed.instance_schedule` adds section 4's rule), the timed climb, the
  allocation, the memory plan (`regal.solution.instance_solution`, `regal.torch.plan`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.graph import Graph

__all__ = ["RecomputeStats", "SequenceError", "check_sequence", "op_costs", "remat_graph", "recompute_stats",
           "instance_graph", "total_cost", "STAND_IN"]

#: What a report says when a graph has no costs and recomputation is charged the stand-in.
STAND_IN = "stand-in: bytes read and written (the graph has no costs)"


class SequenceError(ValueError):
    """A sequence with recomputations that is not a valid schedule (SPEC.md section 3b)."""


class RecomputeStats(NamedTuple):
    count: int            # recomputations: entries of the sequence beyond each node's first
    extra_cost: float     # their cost (op_costs)
    extra_fraction: float  # extra_cost / the cost of running every node once
    cost_model: str       # "cost" (the graph's own) or STAND_IN

    def to_json(self) -> dict:
        return {"count": int(self.count), "extra_cost": float(self.extra_cost),
                "extra_fraction": float(self.extra_fraction), "cost_model": self.cost_model}


def remat_graph(graph: Graph):
    """The `regal._remat.RematGraph` of `graph` (cached on it): pinned nodes, control successors."""
    def make():
        from regal._remat import RematGraph
        n = graph.num_nodes
        owner = np.repeat(np.arange(n), np.diff(graph.ctrl_in_ptr))   # each control edge: u -> owner
        src = np.asarray(graph.ctrl_in_idx, dtype=np.int64)
        order = np.argsort(src, kind="stable")
        ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
        return RematGraph(np.ascontiguousarray(graph.no_recompute, dtype=np.bool_), ptr,
                          np.ascontiguousarray(owner[order], dtype=np.int32))
    return graph.cached("remat_graph", make)


def op_costs(graph: Graph) -> tuple[np.ndarray, str]:
    """(float64[n], model): each node's cost of one run, and which model gave it. The graph's
    `cost` when any node has one; else the stand-in (STAND_IN): bytes(v) + the bytes of v's data
    inputs, for every non-resident node (SPEC.md section 3b). A resident node never runs: 0."""
    def make():
        cost = np.asarray(graph.cost, dtype=np.float64)
        if float(cost[~graph.resident].sum()) > 0.0:
            return np.where(graph.resident, 0.0, cost), "cost"
        reads = np.zeros(graph.num_nodes, dtype=np.float64)
        owner = np.repeat(np.arange(graph.num_nodes), np.diff(graph.in_ptr))
        np.add.at(reads, owner, graph.bytes[graph.in_idx].astype(np.float64))
        stand_in = graph.bytes.astype(np.float64) + reads
        return np.where(graph.resident, 0.0, stand_in), STAND_IN
    return graph.cached("op_costs", make)


def total_cost(graph: Graph) -> float:
    """The cost of running every node once (op_costs), the denominator of extra_fraction."""
    return float(op_costs(graph)[0].sum())


def recompute_stats(graph: Graph, sequence) -> RecomputeStats:
    """Counts and extra cost of a (checked) sequence's recomputations."""
    seq = np.asarray(sequence, dtype=np.int64)
    cost, model = op_costs(graph)
    counts = np.bincount(seq, minlength=graph.num_nodes)
    extra = np.maximum(counts - 1, 0)
    extra_cost = float((extra * cost).sum())
    total = float(cost.sum())
    return RecomputeStats(int(extra.sum()), extra_cost, extra_cost / total if total > 0 else 0.0, model)


def check_sequence(graph: Graph, placement: np.ndarray, sequence, devices: int) -> np.ndarray:
    """Validate a sequence with repeats (SPEC.md section 3b); returns it as contiguous int32.
    placement: already checked (the rules do not depend on it). Raises SequenceError naming the
    first problem."""
    n = graph.num_nodes
    seq = np.asarray(sequence)
    if seq.ndim != 1 or not np.issubdtype(seq.dtype, np.integer):
        raise SequenceError("order must be a list of node indices")
    if ((seq < 0) | (seq >= n)).any():
        raise SequenceError(f"order holds an index outside 0..{n - 1}")
    counts = np.bincount(seq, minlength=n)
    if (counts == 0).any():
        raise SequenceError(f"order misses node '{graph.ids[int(np.flatnonzero(counts == 0)[0])]}'")
    twice = np.flatnonzero((counts > 1) & (graph.kept | graph.no_recompute))
    if twice.size:
        v = int(twice[0])
        what = ("a resident node" if graph.resident[v] else "a graph output" if graph.kept[v]
                else "marked \"recompute\": false")
        raise SequenceError(f"order lists node '{graph.ids[v]}' {int(counts[v])} times; it is {what}, "
                            "which runs once (SPEC.md section 3b)")
    rg = remat_graph(graph)
    seen = np.zeros(n, dtype=bool)
    latest = np.full(n, -1, dtype=np.int64)
    read = np.zeros(seq.shape[0], dtype=bool)
    for t, v in enumerate(seq.tolist()):
        for u in graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]].tolist():
            if not seen[u]:
                raise SequenceError(f"order is not topological: node '{graph.ids[v]}' (entry {t}) comes before "
                                    f"its input '{graph.ids[u]}'")
        if seen[v]:  # a control edge orders every instance of v before its successor
            for w in rg.ctrl_idx[rg.ctrl_ptr[v]:rg.ctrl_ptr[v + 1]].tolist():
                if seen[w]:
                    raise SequenceError(f"order runs node '{graph.ids[v]}' again (entry {t}) after '{graph.ids[w]}', "
                                        "which it is a control input of (SPEC.md section 3b)")
        for u in graph.inputs(v).tolist():
            read[latest[u]] = True
        seen[v] = True
        latest[v] = t
    unread = np.flatnonzero(~read & ~graph.kept[seq])
    if unread.size:
        t = int(unread[0])
        raise SequenceError(f"order entry {t} runs node '{graph.ids[int(seq[t])]}' and no later entry reads it "
                            "(a recomputation must have a reader; SPEC.md section 3b)")
    return np.ascontiguousarray(seq, dtype=np.int32)


def instance_graph(graph: Graph, sequence, *, checked: bool = False) -> tuple[Graph, np.ndarray]:
    """(the instance graph, int64[m] node of each instance): instance i is entry i of `sequence`,
    with the node's fields; its inputs are the latest instances of the node's inputs, its control
    inputs every instance of the node's control inputs, its `reuse` the latest instances of the
    node's `reuse` entries; ids: the node's id for its first instance, "id#k" for its k-th
    (SPEC.md section 3b). Built from the graph's arrays, so the timed climb can pay it per move: with
    its kernel view 0.7 ms on ResNet-18's training step (668 instances) and 11 ms on DenseNet-121's
    (4,534), median of 7, load average 5.7 on 2 cores (records and `Graph.from_records`: 164 ms
    and 1.12 s on such steps).

    The sequence is validated first (`check_sequence`: SequenceError naming the first problem);
    checked=True skips that, for a caller that knows it is valid (a Solution's order, checked
    when the Solution was made; a sequence `regal.recompute_search.recompute_sequence` built)."""
    if not checked:
        check_sequence(graph, None, sequence, 1)
    seq = np.asarray(sequence, dtype=np.int64)
    m, n = seq.shape[0], graph.num_nodes
    key = seq * (m + 1) + np.arange(m, dtype=np.int64)   # the instances by (node, position)
    srt = np.argsort(key, kind="stable")
    skey = key[srt]

    def latest(row, u):   # the latest instance of node u before position `row`
        return srt[np.searchsorted(skey, u * (m + 1) + row, side="left") - 1].astype(np.int32)

    row, u, in_ptr = _rows(graph.in_ptr, graph.in_idx, seq)
    in_idx = latest(row, u)
    row, u, reuse_ptr = _rows(graph.reuse_ptr, graph.reuse_idx, seq)
    reuse_idx = latest(row, u)
    counts = np.bincount(seq, minlength=n)
    first = np.cumsum(counts) - counts   # node u's instances: srt[first[u]:][:counts[u]]
    row, u, _ = _rows(graph.ctrl_in_ptr, graph.ctrl_in_idx, seq)
    k = counts[u]                                            # a control input: every instance of it
    off = np.arange(k.sum(), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    ctrl_idx = srt[np.repeat(first[u], k) + off].astype(np.int32)
    ctrl_ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.repeat(row, k), minlength=m), out=ctrl_ptr[1:])
    rank = np.empty(m, dtype=np.int64)
    rank[srt] = np.arange(m) - first[seq[srt]]
    ids, ops = graph.ids, graph.ops
    inst = Graph(name=graph.name, ids=tuple(ids[v] if r == 0 else f"{ids[v]}#{r + 1}"
                                            for v, r in zip(seq.tolist(), rank.tolist())),
                 ops=tuple(ops[v] for v in seq.tolist()), bytes=graph.bytes[seq], temp_bytes=graph.temp_bytes[seq],
                 cost=graph.cost[seq], resident=graph.resident[seq], in_ptr=in_ptr, in_idx=in_idx,
                 ctrl_in_ptr=ctrl_ptr, ctrl_in_idx=ctrl_idx, reuse_ptr=reuse_ptr, reuse_idx=reuse_idx,
                 output=graph.output[seq], meta=dict(graph.meta), no_recompute=graph.no_recompute[seq])
    return inst, seq


def _rows(ptr, idx, nodes):
    """(the row of each entry, the entries, CSR pointers) of the CSR rows `nodes`, in that order."""
    lo = ptr[nodes]
    cnt = ptr[nodes + 1] - lo
    out_ptr = np.zeros(nodes.shape[0] + 1, dtype=np.int64)
    np.cumsum(cnt, out=out_ptr[1:])
    row = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), cnt)
    at = np.arange(out_ptr[-1], dtype=np.int64) + np.repeat(lo - out_ptr[:-1], cnt)
    return row, np.asarray(idx, dtype=np.int64)[at], out_ptr
