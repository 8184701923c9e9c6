"""Reading an ONNX model (a path, bytes or a ModelProto) and checking it: opset, functions
inlined, no subgraphs, nodes in topological order; see `regal.onnx`."""

from __future__ import annotations

import gzip
import os
import warnings
import zlib

import onnx
from google.protobuf.message import DecodeError

from regal.graph import GraphError
from regal.onnx.ops import CONTROL_FLOW_OPS, TESTED_OPSETS


# ---------------------------------------------------------------------- reading
def _read(path_or_model) -> tuple[onnx.ModelProto, str, str | None]:
    """(model, source name for messages, directory of external data or None)."""
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model, f"onnx model '{path_or_model.graph.name}'", None
    if isinstance(path_or_model, (bytes, bytearray, memoryview)):
        return _parse(bytes(path_or_model), "<onnx bytes>"), "<onnx bytes>", None
    if not isinstance(path_or_model, (str, os.PathLike)):
        raise GraphError(f"load_onnx: expected a path, bytes or an onnx.ModelProto, got "
                         f"{type(path_or_model).__name__}")
    source = os.fspath(path_or_model)
    try:
        with open(source, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        from regal.graph.io import GraphFileNotFound
        raise GraphFileNotFound(source) from None
    except OSError as e:
        raise GraphError(f"{source}: cannot read ({type(e).__name__}: {e.strerror})") from None
    return _parse(data, source), source, os.path.dirname(os.path.abspath(source))


def _parse(data: bytes, source: str) -> onnx.ModelProto:
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as e:
            raise GraphError(f"{source}: not a gzip file ({type(e).__name__}: {_one_line(e)})") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise GraphError(f"{source}: not an ONNX model ({type(e).__name__}: {_one_line(e)})") from None
    if not model.HasField("graph") or (len(model.graph.node) == 0 and len(model.graph.input) == 0
                                       and len(model.graph.initializer) == 0):
        raise GraphError(f"{source}: not an ONNX model (no graph)")
    return model


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _label(node: onnx.NodeProto, i: int) -> str:
    """How messages name an ONNX node: its name, else its position and first output."""
    if node.name:
        return f"node '{node.name}' ({node.op_type})"
    out = next((o for o in node.output if o), "")
    return f"node #{i} ({node.op_type}{f', output {out!r}' if out else ''})"


# ---------------------------------------------------------------------- checks and order
def _check_opset(model: onnx.ModelProto, source: str) -> int | None:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset not in TESTED_OPSETS:
        warnings.warn(f"{source}: ONNX opset {opset} is outside the tested range "
                      f"{TESTED_OPSETS.start}-{TESTED_OPSETS.stop - 1}", UserWarning, stacklevel=3)
    return opset


def _inline_functions(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    if len(model.functions) == 0:
        return model
    import onnx.inliner
    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as e:  # the C++ inliner raises bare RuntimeErrors and pybind errors
        raise GraphError(f"{source}: cannot inline the model's local functions ({_one_line(e)})") from None


def _reject_subgraphs(nodes, source: str) -> None:
    graph_attrs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    for i, node in enumerate(nodes):
        if node.op_type in CONTROL_FLOW_OPS or any(a.type in graph_attrs or a.HasField("g") or len(a.graphs)
                                                   for a in node.attribute):
            raise GraphError(f"{source}: {_label(node, i)} has a subgraph: control flow (If/Loop/Scan) is "
                             f"not supported; export with static control flow")


def _sorted_nodes(graph: onnx.GraphProto, defined: set[str], source: str) -> list[int]:
    """Node positions in a topological order (file order where it is one); GraphError on a
    dangling input, an output defined twice, or a cycle."""
    nodes = graph.node
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if not all(isinstance(x, str) for x in (node.name, node.op_type, node.domain, *node.input, *node.output)):
            raise GraphError(f"{source}: node #{i}: a name is not valid UTF-8")
        for o in node.output:
            if not o:
                continue
            if o in producer or o in defined:
                raise GraphError(f"{source}: {_label(node, i)}: tensor '{o}' is defined twice")
            producer[o] = i
    preds: list[list[int]] = []
    for i, node in enumerate(nodes):
        p = []
        for x in node.input:
            if not x or x in defined:
                continue
            j = producer.get(x)
            if j is None:
                raise GraphError(f"{source}: {_label(node, i)}: input '{x}' is not produced by any node, "
                                 f"initializer or graph input")
            if j == i:
                raise GraphError(f"{source}: the graph has a cycle through {_label(node, i)}")
            p.append(j)
        preds.append(p)
    if all(j < i for i, p in enumerate(preds) for j in p):
        return list(range(len(nodes)))  # the ONNX norm: nodes already in topological order
    return _kahn(nodes, preds, source)


def _kahn(nodes, preds: list[list[int]], source: str) -> list[int]:
    import heapq
    succ: list[list[int]] = [[] for _ in preds]
    indeg = [0] * len(preds)
    for i, p in enumerate(preds):
        for j in set(p):
            succ[j].append(i)
            indeg[i] += 1
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in succ[i]:
            indeg[k] -= 1
            if indeg[k] == 0:
                heapq.heappush(ready, k)
    if len(order) < len(preds):
        stuck = min(set(range(len(preds))) - set(order))
        raise GraphError(f"{source}: the graph has a cycle through {_label(nodes[stuck], stuck)}")
    return order
