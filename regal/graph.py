"""The computation graph as flat arrays, and the `regal-graph/1` file format (SPEC.md section 1).

A `Graph` is built once (from a file, from networkx, or from a list of node records) and is
then shared, read-only, by every solver. Nodes are indexed `0..num_nodes-1` in file order; that
index is the tie-breaker of the decoder (SPEC.md section 5). Edges are stored as CSR arrays:

    in_ptr:  int64[num_nodes + 1]   data inputs of node v are in_idx[in_ptr[v]:in_ptr[v+1]]
    in_idx:  int32[num_data_edges]  (in the order the file lists them)
    out_ptr, out_idx                 data consumers, the transpose of the above
    ctrl_in_ptr, ctrl_in_idx         control (ordering-only) inputs
    ctrl_out_ptr, ctrl_out_idx       their transpose
    pred_ptr, pred_idx               data and control inputs together, without repeats
    succ_ptr, succ_idx               their transpose (what Kahn's algorithm walks)
    reuse_ptr, reuse_idx             the data inputs whose buffer each node may take over (field
                                     `reuse`, SPEC.md section 3), in preference order
    output                           bool[num_nodes]: the graph returns it (field `output`): its home
                                     copy is never freed, though it has consumers (SPEC.md section 3)

Every validation failure raises `GraphError` with a one-line message that names the node.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from regal import _kernels
from regal._io import atomic_text, open_text

__all__ = ["GRAPH_FORMAT", "MAX_TOTAL_BYTES", "Graph", "GraphError", "check_devices", "load", "save", "from_json",
           "from_networkx", "to_networkx", "mark_outputs"]

GRAPH_FORMAT = "regal-graph/1"

_T = TypeVar("_T")


#: The most bytes a graph may hold: every node's bytes and temp_bytes together. Below 2**53 a
#: float64 (the BRKGA's fitness) holds every peak exactly, and no int64 sum can overflow; every
#: device peak is at most this total (a device holds each tensor at most once).
MAX_TOTAL_BYTES = 2**53 - 1


def check_devices(devices, name: str = "devices") -> int:
    """The device count as an int; ValueError naming `name` unless it is a positive integer."""
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise ValueError(f"{name} must be a positive integer, got {devices!r}")
    return int(devices)


class GraphError(ValueError):
    """A graph (file or in-memory) that breaks SPEC.md section 1; the message names the culprit."""


def _csr(num_nodes: int, lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists]) if num_nodes else []
    idx = np.fromiter((u for x in lists for u in x), dtype=np.int32, count=int(ptr[-1]))
    return ptr, idx


def _transpose(num_nodes: int, ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the reversed edges; each row lists sources in increasing node order."""
    dst = np.repeat(np.arange(num_nodes, dtype=np.int32), np.diff(ptr))
    order = np.lexsort((dst, idx))  # group by source, then by consumer index
    tptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(idx, minlength=num_nodes), out=tptr[1:])
    return tptr, dst[order].astype(np.int32)


def _union_csr(num_nodes: int, a_ptr: np.ndarray, a_idx: np.ndarray, b_ptr: np.ndarray,
               b_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR whose row v holds the sources of row v of `a` and of `b`, without repeats, increasing."""
    lists = []
    for v in range(num_nodes):
        a = a_idx[a_ptr[v]:a_ptr[v + 1]].tolist()
        b = b_idx[b_ptr[v]:b_ptr[v + 1]].tolist()
        lists.append(sorted(set(a) | set(b)))
    return _csr(num_nodes, lists)


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

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_records(cls, nodes: Sequence[Mapping[str, Any]], name: str = "graph",
                     meta: Mapping[str, Any] | None = None, source: str = "graph") -> "Graph":
        """Validate node records (the `nodes` list of a `regal-graph/1` file) and build a Graph.

        `source` names where the records came from (a file path) in error messages.
        """
        if not isinstance(nodes, (list, tuple)):
            raise GraphError(f"{source}: 'nodes' must be a list")
        if len(nodes) == 0:
            raise GraphError(f"{source}: the graph is empty (no nodes)")
        if not _utf8(str(name)):
            raise GraphError(f"{source}: the graph's name {name!r} is not a valid Unicode string "
                             "(a lone surrogate cannot be written to a file)")
        index: dict[str, int] = {}
        for i, rec in enumerate(nodes):
            if not isinstance(rec, Mapping):
                raise GraphError(f"{source}: node #{i} is not an object")
            nid = rec.get("id")
            if not isinstance(nid, str) or not nid:
                raise GraphError(f"{source}: node #{i} has no string 'id'")
            if nid in index:
                raise GraphError(f"{source}: duplicate node id {nid!r}")
            if not _utf8(nid):
                raise GraphError(f"{source}: node id {nid!r} is not valid Unicode (a lone surrogate)")
            index[nid] = i

        n = len(nodes)
        nbytes = np.zeros(n, dtype=np.int64)
        temp = np.zeros(n, dtype=np.int64)
        cost = np.zeros(n, dtype=np.float64)
        resident = np.zeros(n, dtype=bool)
        output = np.zeros(n, dtype=bool)
        ops: list[str] = []
        data_in: list[list[int]] = []
        ctrl_in: list[list[int]] = []
        reuse: list[list[int]] = []
        total = 0
        for i, rec in enumerate(nodes):
            nid = rec["id"]
            nbytes[i] = _int_field(rec, "bytes", nid, source, required=True)
            temp[i] = _int_field(rec, "temp_bytes", nid, source, required=False)
            total += int(nbytes[i]) + int(temp[i])
            if total > MAX_TOTAL_BYTES:
                raise GraphError(f"{source}: node {nid!r}: the graph's bytes and temp_bytes add up to more "
                                 f"than {MAX_TOTAL_BYTES:,} (2**53 - 1), the most regal computes exactly")
            c = rec.get("cost", 0.0)
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
                raise GraphError(f"{source}: node {nid!r}: 'cost' must be a finite number >= 0, got {c!r}")
            cost[i] = float(c)
            r = rec.get("resident", False)
            if not isinstance(r, bool):
                raise GraphError(f"{source}: node {nid!r}: 'resident' must be true or false, got {r!r}")
            resident[i] = r
            o = rec.get("output", False)
            if not isinstance(o, bool):
                raise GraphError(f"{source}: node {nid!r}: 'output' must be true or false, got {o!r}")
            output[i] = o
            op = rec.get("op", "op")
            if not isinstance(op, str):
                raise GraphError(f"{source}: node {nid!r}: 'op' must be a string, got {op!r}")
            ops.append(op)
            data_in.append(_id_list(rec, "inputs", nid, index, source))
            ctrl_in.append(_id_list(rec, "control_inputs", nid, index, source))
            if r and (data_in[-1] or ctrl_in[-1]):
                raise GraphError(f"{source}: node {nid!r} is resident but has inputs")
            reuse.append(_reuse_list(rec, nid, index, data_in[-1], source) if "reuse" in rec else [])

        in_ptr, in_idx = _csr(n, data_in)
        ctrl_ptr, ctrl_idx = _csr(n, ctrl_in)
        reuse_ptr, reuse_idx = _csr(n, reuse)
        g = cls(name=str(name), ids=tuple(index), ops=tuple(ops), bytes=nbytes, temp_bytes=temp,
                cost=cost, resident=resident, in_ptr=in_ptr, in_idx=in_idx,
                ctrl_in_ptr=ctrl_ptr, ctrl_in_idx=ctrl_idx, reuse_ptr=reuse_ptr, reuse_idx=reuse_idx,
                output=output, meta=dict(meta or {}))
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
        def make():
            out = np.zeros(self.num_nodes, dtype=np.int64)
            for v in np.flatnonzero(np.diff(self.reuse_ptr)):
                us = self.reuse(v)
                b = self.bytes[us[~(self.resident[us] | self.output[us])]]
                out[v] = min(int(self.bytes[v]), int(b[b <= self.bytes[v]].sum()))
            return out
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
        nodes without consumers, the last step's own node among them) is present; with d devices the resident bytes need at least ceil(total / d) on some device, and
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


def _int_field(rec: Mapping, key: str, nid: str, source: str, required: bool) -> int:
    if key not in rec:
        if required:
            raise GraphError(f"{source}: node {nid!r} has no '{key}'")
        return 0
    x = rec[key]
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not x.is_integer()):
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a non-negative integer, got {x!r}")
    if x < 0:
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a non-negative integer, got {x!r}")
    if x > MAX_TOTAL_BYTES:
        raise GraphError(f"{source}: node {nid!r}: '{key}' is too large ({x!r} > 2**53 - 1)")
    return int(x)


def _id_list(rec: Mapping, key: str, nid: str, index: Mapping[str, int], source: str) -> list[int]:
    raw = rec.get(key, [])
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise GraphError(f"{source}: node {nid!r}: '{key}' must be a list of node ids")
    out = []
    seen = set()
    for u in raw:
        if not isinstance(u, str):
            raise GraphError(f"{source}: node {nid!r}: '{key}' holds {u!r}, not a node id")
        if u not in index:
            raise GraphError(f"{source}: node {nid!r}: {key[:-1].replace('_', ' ')} {u!r} does not exist")
        if u in seen:
            raise GraphError(f"{source}: node {nid!r}: '{key}' lists {u!r} twice")
        if u == nid:
            raise GraphError(f"{source}: the graph has a cycle through node {nid!r}: {nid!r} -> {nid!r}")
        seen.add(u)
        out.append(index[u])
    return out


def _reuse_list(rec: Mapping, nid: str, index: Mapping[str, int], inputs: list[int], source: str) -> list[int]:
    """The node's `reuse` field as node indices: a list of its own data inputs, each once."""
    raw = rec["reuse"]
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise GraphError(f"{source}: node {nid!r}: 'reuse' must be a list of input ids, got {raw!r}")
    out: list[int] = []
    for u in raw:
        if not isinstance(u, str):
            raise GraphError(f"{source}: node {nid!r}: 'reuse' holds {u!r}, not a node id")
        if u not in index or index[u] not in inputs:
            raise GraphError(f"{source}: node {nid!r}: 'reuse' lists {u!r}, which is not one of its data inputs")
        if index[u] in out:
            raise GraphError(f"{source}: node {nid!r}: 'reuse' lists {u!r} twice")
        out.append(index[u])
    return out


def mark_outputs(records: list[dict], outputs) -> None:
    """For importers: mark the records at indices `outputs` (what the graph returns) `output`,
    resident ones excepted (never freed anyway), and drop them from every `reuse` list (an
    output's buffer is never taken over). `reuse` entries are indices or ids, as `outputs` are."""
    returned = set(outputs)
    for i in returned:
        if not records[i].get("resident"):
            records[i]["output"] = True
    ids = {records[i]["id"] for i in returned}
    for r in records:
        if "reuse" in r:
            keep = [u for u in r["reuse"] if u not in returned and u not in ids]
            if keep:
                r["reuse"] = keep
            else:
                del r["reuse"]


def from_json(doc: Any, source: str = "graph") -> Graph:
    """Build a Graph from a parsed `regal-graph/1` document."""
    if not isinstance(doc, Mapping):
        raise GraphError(f"{source}: not a regal-graph/1 document (top level is not an object)")
    fmt = doc.get("format")
    if fmt != GRAPH_FORMAT:
        raise GraphError(f"{source}: not a {GRAPH_FORMAT} file (format is {fmt!r})")
    if "nodes" not in doc:
        raise GraphError(f"{source}: no 'nodes' list")
    meta = doc.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise GraphError(f"{source}: 'meta' must be an object")
    name = doc.get("name") or os.path.basename(source).split(".")[0]
    return Graph.from_records(doc["nodes"], name=str(name), meta=meta, source=source)


def _utf8(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (JSON's "\\ud800" reads as a lone surrogate, which cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load(path: str | os.PathLike) -> Graph:
    """Read a `regal-graph/1` file (`.json` or `.json.gz`); errors are `GraphError`s naming the file."""
    source = os.fspath(path)
    try:
        with open_text(source, "rt") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise GraphError(f"{source}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, gzip.BadGzipFile, EOFError, OSError) as e:
        raise GraphError(f"{source}: not a JSON file ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    except RecursionError:
        raise GraphError(f"{source}: not a regal-graph/1 file (JSON nested too deep)") from None
    return from_json(doc, source)


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write `graph` as `regal-graph/1`; gzip-compressed when the path ends in `.gz`."""
    with atomic_text(path) as f:
        json.dump(graph.to_json(), f, separators=(",", ":"))


# ---------------------------------------------------------------------- networkx boundary
def to_networkx(graph: Graph):
    """A `networkx.DiGraph`: node attributes as in the file, edges with `kind` = 'data' or 'control'.

    A pair that is both a data and a control edge keeps `kind='data'` and `control=True`.
    Node attribute `order` is the node's index, so the round trip keeps node order.
    """
    import networkx as nx
    g = nx.DiGraph(name=graph.name, meta=dict(graph.meta))
    for v in range(graph.num_nodes):
        g.add_node(graph.ids[v], op=graph.ops[v], bytes=int(graph.bytes[v]),
                   temp_bytes=int(graph.temp_bytes[v]), cost=float(graph.cost[v]),
                   resident=bool(graph.resident[v]), order=v)
        if graph.output[v]:
            g.nodes[graph.ids[v]]["output"] = True
        if graph.reuse(v).size:
            g.nodes[graph.ids[v]]["reuse"] = [graph.ids[u] for u in graph.reuse(v)]
    for v in range(graph.num_nodes):
        for pos, u in enumerate(graph.inputs(v)):
            g.add_edge(graph.ids[u], graph.ids[v], kind="data", position=pos)
        for pos, u in enumerate(graph.control_inputs(v)):
            a, b = graph.ids[u], graph.ids[v]
            if g.has_edge(a, b):
                g.edges[a, b]["control"] = True
                g.edges[a, b]["control_position"] = pos
            else:
                g.add_edge(a, b, kind="control", control_position=pos)
    return g


def from_networkx(g, name: str | None = None, default_bytes: int | None = None) -> Graph:
    """Build a Graph from a `networkx.DiGraph` whose nodes carry at least `bytes`.

    Edges are data edges unless `kind='control'`; an edge with `control=True` is both. Node order
    follows the `order` attribute when every node has one, else networkx's iteration order; input
    order follows the edge attribute `position` when present. Node ids are `str(node)`.
    `default_bytes`, when given, fills in nodes without a `bytes` attribute.
    """
    nodes = list(g.nodes)
    if nodes and all("order" in g.nodes[v] for v in nodes):
        nodes.sort(key=lambda v: g.nodes[v]["order"])
    recs = []
    for v in nodes:
        a = g.nodes[v]
        rec: dict[str, Any] = {"id": str(v)}
        for k in ("op", "bytes", "temp_bytes", "cost", "resident", "output"):
            if k in a:
                rec[k] = a[k]
        if "reuse" in a:  # node ids become strings, as above; anything else is left to validation
            rec["reuse"] = [str(u) for u in a["reuse"]] if isinstance(a["reuse"], (list, tuple)) else a["reuse"]
        if "bytes" not in rec and default_bytes is not None:
            rec["bytes"] = default_bytes
        data, ctrl = [], []
        for u in g.predecessors(v):
            e = g.edges[u, v]
            if e.get("kind", "data") == "data":
                data.append((e.get("position", 0), str(u)))
            if e.get("kind") == "control" or e.get("control", False):
                ctrl.append((e.get("control_position", 0), str(u)))
        rec["inputs"] = [u for _, u in sorted(data, key=lambda t: t[0])]
        rec["control_inputs"] = [u for _, u in sorted(ctrl, key=lambda t: t[0])]
        recs.append(rec)
    meta = dict(g.graph.get("meta", {}))
    return Graph.from_records(recs, name=name or g.graph.get("name") or "graph", meta=meta, source="networkx graph")
