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
- `instance_graph`: the instance graph as a `Graph`, for what reads a schedule after the search
  (the timed model, the allocation, the memory plan; `regal.solution.instance_solution`).
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
    placement: already checked. Raises SequenceError naming the first problem."""
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


def instance_graph(graph: Graph, sequence) -> tuple[Graph, np.ndarray]:
    """(the instance graph, int64[m] node of each instance): instance i is entry i of `sequence`
    (checked), with the node's fields; its inputs are the latest instances of the node's inputs,
    its control inputs every instance of the node's control inputs; ids: the node's id for its first instance,
    "id#k" for its k-th (SPEC.md section 3b)."""
    seq = np.asarray(sequence, dtype=np.int64)
    latest, every, seen, ids, records = {}, {}, {}, [], []
    for i, v in enumerate(seq.tolist()):
        seen[v] = seen.get(v, 0) + 1
        name = graph.ids[v] if seen[v] == 1 else f"{graph.ids[v]}#{seen[v]}"
        ids.append(name)
        rec = {"id": name, "op": graph.ops[v], "bytes": int(graph.bytes[v]),
               "temp_bytes": int(graph.temp_bytes[v]), "cost": float(graph.cost[v]),
               "inputs": [ids[latest[u]] for u in graph.inputs(v).tolist()],
               "control_inputs": [ids[i] for u in graph.control_inputs(v).tolist() for i in every[u]],
               "reuse": [ids[latest[u]] for u in graph.reuse(v).tolist()]}
        if graph.resident[v]:
            rec["resident"] = True
        if graph.output[v]:
            rec["output"] = True
        if graph.no_recompute[v]:
            rec["recompute"] = False
        records.append(rec)
        latest[v] = i
        every.setdefault(v, []).append(i)
    return Graph.from_records(records, name=graph.name, meta=dict(graph.meta)), seq
