"""`regal-graph/1` files (`load`, `save`, `from_json`) and the networkx boundary; see `regal.graph`."""

from __future__ import annotations

import gc
import gzip
import json
import os
from contextlib import contextmanager
from typing import Any, Mapping

from regal._io import FileNotFound, atomic_text, open_text, read_json
from regal.graph.core import GRAPH_FORMAT, Graph
from regal.graph.records import GraphError


class GraphFileNotFound(FileNotFound, GraphError):
    """A graph file (JSON, HLO or ONNX) that does not exist: a `GraphError` (one line naming the
    file, as every bad input) and a `FileNotFoundError` (an OSError, as `open` raises), through
    `regal._io.FileNotFound`."""


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
    return Graph.from_records(doc["nodes"], name=str(name), meta=meta, source=source, unknown_keys="ignore")


@contextmanager
def _gc_paused():
    """Python's cyclic garbage collector off in the body (and back on after, if it was on): the
    JSON parse and the checks create a few objects per node and none in a cycle, yet each
    collection walks all the objects made so far (issue 36: at 300K nodes a load took 14 s with
    it, 7 s without)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path: str | os.PathLike) -> Graph:
    """Read a `regal-graph/1` file (`.json` or `.json.gz`); errors are `GraphError`s naming the file."""
    with _gc_paused():
        return _load(os.fspath(path))


def _load(source: str) -> Graph:
    try:
        with open_text(source, "rt") as f:
            doc = read_json(f)
    except FileNotFoundError:
        raise GraphFileNotFound(source) from None
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
        if graph.no_recompute[v]:
            g.nodes[graph.ids[v]]["recompute"] = False
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
        for k in ("op", "bytes", "temp_bytes", "cost", "resident", "output", "recompute"):
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
