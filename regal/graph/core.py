"""`Graph`: the flat arrays every solver reads, built from node records; see `regal.graph`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from regal.kernels import decode as _kernels
from regal.graph.records import GraphError, _transpose, _union_csr, _utf8, bulk_fields, record_fields


GRAPH_FORMAT = "regal-graph/1"

_T = TypeVar("_T")


def _kahn_order(graph: "Graph") -> np.ndarray:
    """int32[<= n]: Kahn's algorithm over data and control edges, lowest index first.

    `_kernels.priority_order` with every priority equal, so its ties (to the lower index) decide
    alone. No node is passed as resident: the kernel's shortcut for resident nodes assumes they
    have no predecessors, which only a validated graph guarantees, and this also runs to find
    cycles. Shorter than n iff the graph has a cycle.
    """
    n = graph.num_nodes
    order = np.empty(n, dtype=np.int32)
    count = _kernels.priority_order(np.zeros(n), n, np.diff(graph.pred_ptr).astype(np.int32),
                                    np.ascontiguousarray(graph.succ_ptr, dtype=np.int64),
                                    np.ascontiguousarray(graph.succ_idx, dtype=np.int32),
                                    np.zeros(n, dtype=np.bool_), order)
    return order[:count]


@dataclass(frozen=True, eq=False)
class Graph:
    """A computation graph in flat arrays. Build with `Graph.from_records`, `load` or `from_networkx`.

    Fields (n = num_nodes):
        name: str
        ids: tuple[str, ...]        node ids, length n
        ops: tuple[str, ...]        op names, length n
        bytes: int64[n]             output size of each node
        temp_bytes: int64[n]        scratch held only while the node runs
        cost: float64[n]            run time in seconds (timed model only)
        resident: bool[n]           output exists before execution and is never freed
        in_ptr/in_idx, out_ptr/out_idx, ctrl_*, pred_*, succ_*: CSR edges, see module docstring
        reuse_ptr/reuse_idx         CSR: the inputs node v may take over, reuse_idx[reuse_ptr[v]:reuse_ptr[v+1]]
        output: bool[n]             returned by the graph: its home copy is never freed (field `output`)
        meta: dict                  free-form metadata carried through files
        no_recompute: bool[n]       may not run more than once (field `recompute`: false; SPEC.md 3b)
    """

    name: str
    ids: tuple
    ops: tuple
    bytes: np.ndarray
    temp_bytes: np.ndarray
    cost: np.ndarray
    resident: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    ctrl_in_ptr: np.ndarray
    ctrl_in_idx: np.ndarray
    reuse_ptr: np.ndarray
    reuse_idx: np.ndarray
    output: np.ndarray
    meta: dict = field(default_factory=dict)
    no_recompute: np.ndarray | None = None   # None: every node may be recomputed

    def __post_init__(self):
        if self.no_recompute is None:
            object.__setattr__(self, "no_recompute", np.zeros(len(self.ids), dtype=bool))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_records(cls, nodes: Sequence[Mapping[str, Any]], name: str = "graph",
                     meta: Mapping[str, Any] | None = None, source: str = "graph",
                     unknown_keys: str = "error") -> "Graph":
        """Validate node records (the `nodes` list of a `regal-graph/1` file) and build a Graph.

        `source` names where the records came from (a file path) in error messages.
        unknown_keys: "error" (a record key that is not a field of SPEC section 1, such as a
        misspelled "inptus", is a GraphError naming the node and the key) or "ignore" (what a
        graph file's reader does: SPEC section 1 lets files carry other keys).
        """
        if not isinstance(nodes, (list, tuple)):
            raise GraphError(f"{source}: 'nodes' must be a list")
        if len(nodes) == 0:
            raise GraphError(f"{source}: the graph is empty (no nodes)")
        if unknown_keys not in ("error", "ignore"):
            raise ValueError(f"unknown_keys must be 'error' or 'ignore', got {unknown_keys!r}")
        if unknown_keys == "error":
            _refuse_unknown_keys(nodes, source)
        if not _utf8(str(name)):
            raise GraphError(f"{source}: the graph's name {name!r} is not a valid Unicode string "
                             "(a lone surrogate cannot be written to a file)")
        f = bulk_fields(nodes) or record_fields(nodes, source)
        g = cls(name=str(name), ids=tuple(f.index), ops=tuple(f.ops), bytes=f.bytes, temp_bytes=f.temp,
                cost=f.cost, resident=f.resident, in_ptr=f.data_in[0], in_idx=f.data_in[1],
                ctrl_in_ptr=f.ctrl_in[0], ctrl_in_idx=f.ctrl_in[1], reuse_ptr=f.reuse[0], reuse_idx=f.reuse[1],
                output=f.output, meta=dict(meta or {}), no_recompute=f.no_recompute)
        g._check_acyclic(source)
        return g

    def _check_acyclic(self, source: str) -> None:
        order = self.topological_order()
        if len(order) == self.num_nodes:
            return
        cycle = self._find_cycle(set(range(self.num_nodes)) - set(order.tolist()))
        names = " -> ".join(repr(self.ids[v])[1:-1] for v in cycle + cycle[:1])
        raise GraphError(f"{source}: the graph has a cycle through node {self.ids[cycle[0]]!r}: {names}")

    def _find_cycle(self, candidates: set[int]) -> list[int]:
        """Walk predecessors inside the nodes Kahn could not order until a node repeats."""
        v = min(candidates)
        seen: dict[int, int] = {}
        path: list[int] = []
        while v not in seen:
            seen[v] = len(path)
            path.append(v)
            v = next(int(u) for u in self.pred_idx[self.pred_ptr[v]:self.pred_ptr[v + 1]] if int(u) in candidates)
        cyc = path[seen[v]:]
        cyc.reverse()  # predecessor walk -> producer-to-consumer direction
        first = cyc.index(min(cyc))
        return cyc[first:] + cyc[:first]

    # ------------------------------------------------------------------ derived arrays
    @property
    def num_nodes(self) -> int:
        return len(self.ids)

    @property
    def num_data_edges(self) -> int:
        return int(self.in_idx.shape[0])

    @property
    def num_control_edges(self) -> int:
        return int(self.ctrl_in_idx.shape[0])

    def cached(self, key: str, make: Callable[[], _T]) -> _T:
        """`make()`, computed on the first call with `key` and kept on the graph for later calls.

        For values derived from the graph's (read-only) arrays: the CSR transposes here, the
        kernel view of `regal.simulate`. Callers share the value, so they must not modify it.
        """
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache[key] = make()
        return cache[key]

    @property
    def out_ptr(self) -> np.ndarray:
        return self._out()[0]

    @property
    def out_idx(self) -> np.ndarray:
        return self._out()[1]

    def _out(self):
        return self.cached("out", lambda: _transpose(self.num_nodes, self.in_ptr, self.in_idx))

    @property
    def ctrl_out_ptr(self) -> np.ndarray:
        return self._ctrl_out()[0]

    @property
    def ctrl_out_idx(self) -> np.ndarray:
        return self._ctrl_out()[1]

    def _ctrl_out(self):
        return self.cached("ctrl_out", lambda: _transpose(self.num_nodes, self.ctrl_in_ptr, self.ctrl_in_idx))

    def _pred(self):
        return self.cached("pred", lambda: _union_csr(self.num_nodes, self.in_ptr, self.in_idx,
                                                      self.ctrl_in_ptr, self.ctrl_in_idx))

    @property
    def pred_ptr(self) -> np.ndarray:
        return self._pred()[0]

    @property
    def pred_idx(self) -> np.ndarray:
        return self._pred()[1]

    @property
    def succ_ptr(self) -> np.ndarray:
        return self._succ()[0]

    @property
    def succ_idx(self) -> np.ndarray:
        return self._succ()[1]

    def _succ(self):
        return self.cached("succ", lambda: _transpose(self.num_nodes, self.pred_ptr, self.pred_idx))

    @property
    def index(self) -> dict[str, int]:
        """Map from node id to node index."""
        return self.cached("index", lambda: {nid: i for i, nid in enumerate(self.ids)})

    def inputs(self, v: int) -> np.ndarray:
        """Data inputs of node `v` (node indices)."""
        return self.in_idx[self.in_ptr[v]:self.in_ptr[v + 1]]

    def consumers(self, v: int) -> np.ndarray:
        """Data consumers of node `v` (node indices, increasing)."""
        return self.out_idx[self.out_ptr[v]:self.out_ptr[v + 1]]

    def control_inputs(self, v: int) -> np.ndarray:
        return self.ctrl_in_idx[self.ctrl_in_ptr[v]:self.ctrl_in_ptr[v + 1]]

    def reuse(self, v: int) -> np.ndarray:
        """The data inputs whose buffer node `v` may take over, in preference order (SPEC.md section 3)."""
        return self.reuse_idx[self.reuse_ptr[v]:self.reuse_ptr[v + 1]]

    @property
    def kept(self) -> np.ndarray:
        """bool[n]: nodes whose home copy is never freed once present (SPEC.md section 3):
        resident nodes, graph outputs marked `output`, and nodes without data consumers."""
        return self.cached("kept", lambda: self.resident | self.output | (np.diff(self.out_ptr) == 0))

    @property
    def has_reuse(self) -> bool:
        """Whether some node lists inputs it may take over (the field `reuse`)."""
        return self.reuse_idx.shape[0] > 0

    def max_taken_bytes(self) -> np.ndarray:
        """int64[n]: the most bytes of its inputs node v can take over (SPEC.md section 3):
        min(bytes(v), the bytes of its `reuse` inputs that are neither resident nor outputs and
        no larger than bytes(v))."""
        def make():  # one pass over the entries, not a Python loop over nodes (1M nodes: 3.6 s)
            owner = np.repeat(np.arange(self.num_nodes), np.diff(self.reuse_ptr))
            us = self.reuse_idx
            b = self.bytes[us].astype(np.int64)
            ok = ~(self.resident[us] | self.output[us]) & (b <= self.bytes[owner])
            total = np.zeros(self.num_nodes, dtype=np.int64)
            np.add.at(total, owner[ok], b[ok])
            return np.minimum(self.bytes.astype(np.int64), total)
        return self.cached("max_taken", make)

    def topological_order(self) -> np.ndarray:
        """int64[n]: Kahn's algorithm, lowest index first; shorter than num_nodes iff there is a cycle."""
        return _kahn_order(self).astype(np.int64)

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """(from_sources, to_sinks), int64[n] each: edges on the longest path from any source to v
        and from v to any sink (data and control edges). The graph must be acyclic."""
        from_sources = np.zeros(self.num_nodes, dtype=np.int64)
        to_sinks = np.zeros(self.num_nodes, dtype=np.int64)
        _kernels.longest_path_levels(_kahn_order(self), np.ascontiguousarray(self.succ_ptr, dtype=np.int64),
                                     np.ascontiguousarray(self.succ_idx, dtype=np.int32), from_sources, to_sinks)
        return from_sources, to_sinks

    def depth(self) -> int:
        """Number of nodes on the longest path (data and control edges)."""
        return int(self.levels()[0].max()) + 1

    def node_lower_bound_bytes(self) -> np.ndarray:
        """int64[n]: inputs + output + temp of each node, less the most it can take over of its
        inputs (`max_taken_bytes`): memory any device running it must hold."""
        in_sum = np.zeros(self.num_nodes, dtype=np.int64)
        np.add.at(in_sum, np.repeat(np.arange(self.num_nodes), np.diff(self.in_ptr)), self.bytes[self.in_idx])
        return in_sum + self.bytes + self.temp_bytes - self.max_taken_bytes()

    def lower_bound(self, devices: int = 1) -> int:
        """A lower bound on peak_bytes (SPEC.md section 3) for any placement and order.

        Any device running v holds all of v's inputs, its output and its temp (less the inputs it
        may take over, which its output then holds: `max_taken_bytes`). With one device
        every resident tensor is also always present, so the bound adds them to the non-resident
        part; and when the last step runs, every node that is never freed (`kept`: outputs and
        nodes without consumers, the last step's own node among them) is present; with d devices the
        resident bytes need at least ceil(total / d) on some device, and
        the one-device bound over d holds too (interleaving the d schedules gives a one-device
        schedule that needs at most the sum of the device memories; SPEC.md section 7).
        """
        per_node = self.node_lower_bound_bytes()
        run = ~self.resident
        res_total = int(self.bytes[self.resident].sum())
        if devices == 1:
            nonres_in = np.zeros(self.num_nodes, dtype=np.int64)
            src = np.repeat(np.arange(self.num_nodes), np.diff(self.in_ptr))
            w = np.where(self.resident[self.in_idx], 0, self.bytes[self.in_idx])
            np.add.at(nonres_in, src, w)
            tail = nonres_in + self.bytes + self.temp_bytes - self.max_taken_bytes()
            kept_total = int(self.bytes[self.kept & run].sum())
            return res_total + max(int(tail[run].max(initial=0)), kept_total)
        res_share = -(-res_total // devices)
        res_max = int(self.bytes[self.resident].max(initial=0))
        one_device_share = -(-self.lower_bound(1) // devices)  # SPEC.md section 7
        return max(int(per_node[run].max(initial=0)), res_share, res_max, one_device_share)

    # ------------------------------------------------------------------ records / files
    def to_records(self) -> list[dict]:
        """The `nodes` list of a `regal-graph/1` file; default-valued keys are left out."""
        recs = []
        for v in range(self.num_nodes):
            rec: dict[str, Any] = {"id": self.ids[v], "op": self.ops[v], "bytes": int(self.bytes[v])}
            if self.resident[v]:
                rec["resident"] = True
            if self.output[v]:
                rec["output"] = True
            if self.no_recompute[v]:
                rec["recompute"] = False
            ins = self.inputs(v)
            if ins.size:
                rec["inputs"] = [self.ids[u] for u in ins]
            ctrl = self.control_inputs(v)
            if ctrl.size:
                rec["control_inputs"] = [self.ids[u] for u in ctrl]
            if self.temp_bytes[v]:
                rec["temp_bytes"] = int(self.temp_bytes[v])
            if self.cost[v]:
                rec["cost"] = float(self.cost[v])
            reuse = self.reuse(v)
            if reuse.size:
                rec["reuse"] = [self.ids[u] for u in reuse]
            recs.append(rec)
        return recs

    def to_json(self) -> dict:
        return {"format": GRAPH_FORMAT, "name": self.name, "nodes": self.to_records(), "meta": self.meta}

    def summary(self) -> dict:
        """The numbers `regal info` prints."""
        largest = int(np.argmax(self.bytes))
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "data_edges": self.num_data_edges,
            "control_edges": self.num_control_edges,
            "resident_nodes": int(self.resident.sum()),
            "total_bytes": int(self.bytes.sum()),
            "resident_bytes": int(self.bytes[self.resident].sum()),
            "output_nodes": int(self.output.sum()),
            "kept_bytes": int(self.bytes[self.kept & ~self.resident].sum()),
            "largest_tensor": {"id": self.ids[largest], "bytes": int(self.bytes[largest])},
            "depth": self.depth(),
            "lower_bound_bytes_1_device": self.lower_bound(1),
        }


#: The keys of a node record (SPEC section 1).
RECORD_KEYS = frozenset(("id", "op", "bytes", "temp_bytes", "cost", "resident", "output", "inputs",
                         "control_inputs", "reuse", "recompute"))


def _refuse_unknown_keys(nodes: Sequence, source: str) -> None:
    """GraphError naming the first record with a key that is not in RECORD_KEYS, and the key."""
    keys = set()
    for rec in nodes:
        if isinstance(rec, Mapping):
            keys.update(rec.keys())
    if keys <= RECORD_KEYS:
        return
    import difflib
    for rec in nodes:
        if not isinstance(rec, Mapping):
            continue
        for key in rec:
            if key not in RECORD_KEYS:
                close = difflib.get_close_matches(str(key), sorted(RECORD_KEYS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(RECORD_KEYS))})"
                raise GraphError(f"{source}: node {rec.get('id')!r} has an unknown key {key!r}{hint}")
