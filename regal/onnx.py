"""ONNX model -> `Graph` (SPEC.md section 1), sized by ONNX shape inference.

    graph = regal.onnx.load_onnx("bert.onnx.gz", dims={"batch": 8, "sequence": 128})

Tested with onnx 1.16.2, 1.17.0 and 1.23.2, and default-domain opsets `TESTED_OPSETS` (13 to
21); another opset imports with a `UserWarning`. Needs the `onnx` package only (no runtime, no weights).

What each part of the model becomes:

- An initializer (a weight), and a graph input that is not one (an argument: the SPEC's
  "exists before execution"), is a **resident** node: op `initializer` or `input`, bytes from
  its declared dims and element type. A `Constant` node is resident too (op `Constant`), as
  hlo.py makes `constant`. Weights stored as external data are never read: a tensor's size is
  in its dims. The one exception is a small integer tensor (at most 1,024 elements) that shape
  inference needs the value of (a Reshape target), which is read from its file when it exists.
- Every other ONNX node is **one** node (id: the node's name, else its first output's name;
  op: the op type, prefixed `domain:` outside the default domain). A multi-output node's
  `bytes` is the sum of its outputs' sizes, as SPEC.md section 1 says and as hlo.py does for a
  multi-output fusion, rather than one node per output: the outputs are allocated together by
  one kernel, and splitting would invent a schedule choice (run the kernel, keep one output)
  that no runtime offers. An output with an empty name is not produced and counts 0 bytes.
- Alias-only ops (`FOLDED_OPS`: Identity, Reshape, Flatten, Squeeze, Unsqueeze) produce no
  node, as hlo.py folds bitcasts: their output *is* the producer's buffer, so its bytes count
  once and stay live until the last real consumer. Their other operand (a shape or axes
  tensor, a few int64s) becomes a data input of the real consumers, so it is freed after them.
- `reuse` (SPEC.md section 3): an elementwise op (`ELEMENTWISE_OPS`: unary and binary
  arithmetic, activations, comparisons, Where, Clip, Cast between same-size types) lists the
  inputs of its output's shape and byte size, each produced by one single-output node, in input
  order: a runtime may write the output over such an input when this op is its last reader
  (ONNX Runtime's allocation planner does, for the ops that declare it).
- `inputs` lists each producer once: an input named twice (`Mul(x, x)`), or two outputs of one
  multi-output node, is one edge. An empty input name (an omitted optional input) is skipped.
- The nodes that produce the graph's outputs are marked `output` (never freed, SPEC.md section
  3, even when consumed inside the graph too: the caller receives the value at the end) and are
  in no `reuse` list; `meta["outputs"]` maps each graph output name to its node ids.
- Control flow (`If`, `Loop`, `Scan`, any node with a subgraph attribute) is **rejected** with
  a message naming the node, not inlined: a branch or a trip count is a run-time value, and
  inlining both branches or an assumed trip count would report memory no execution uses.
  Export with static control flow (torch.export unrolls Python loops). Model-local functions
  are inlined (`onnx.inliner`) before import.

Sizes: the model's value infos after `onnx.shape_inference.infer_shapes(strict_mode=True,
data_prop=True)` on a topologically sorted copy. A symbolic dimension (`dim_param`) in a graph
input needs a value in `dims`; a tensor whose shape stays unknown (an op shape inference does
not know, a data-dependent size) is an error naming its node. Element sizes cover every ONNX
element type (`ELEMENT_BITS`; sub-byte types pack, ceil(elements * bits / 8)); a `STRING`
tensor has no fixed size and counts 8 bytes (a pointer) per element.

`cost`: the roofline of `regal._ops` (`COST_MODEL`: 100 TFLOP/s, 1 TB/s): FLOPs of
MatMul/Gemm/Conv/ConvTranspose (and their integer/quantized forms), bytes moved for the rest.

Every bad input raises `GraphError` (a ValueError) with a one-line message naming the file and
the node: a truncated or garbage file, a cycle, a dangling input, an unknown element type, a
symbolic dimension without a value.
"""

from __future__ import annotations

import gzip
import math
import os
import warnings
import zlib
from typing import Any, Mapping

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from regal._ops import (COST_MODEL, conv_flops, conv_transpose_flops, eval_dim, matmul_flops, packed_bytes,
                        roofline)
from regal.graph import Graph, GraphError, mark_outputs

__all__ = ["CONTROL_FLOW_OPS", "ELEMENT_BITS", "ELEMENTWISE_OPS", "FOLDED_OPS", "TESTED_OPSETS", "load_onnx", "tensor_bytes"]

#: Default-domain opsets the importer is tested with; others import with a warning.
TESTED_OPSETS = range(13, 22)

#: Ops whose output aliases their first input (no new buffer): folded into the producer.
FOLDED_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})

#: Ops with subgraphs; rejected (see the module docstring).
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})

#: Default-domain ops whose output element i depends only on element i of its inputs (after
#: broadcasting): their output may be written over a same-shape input (field `reuse`).
ELEMENTWISE_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "HardSwish", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual",
    "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal",
    "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt",
    "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
})

#: Bits per element of every ONNX element type (TensorProto.DataType). STRING has no fixed
#: size: 64 bits (a pointer) per element.
ELEMENT_BITS = {
    TensorProto.FLOAT: 32, TensorProto.UINT8: 8, TensorProto.INT8: 8, TensorProto.UINT16: 16,
    TensorProto.INT16: 16, TensorProto.INT32: 32, TensorProto.INT64: 64, TensorProto.STRING: 64,
    TensorProto.BOOL: 8, TensorProto.FLOAT16: 16, TensorProto.DOUBLE: 64, TensorProto.UINT32: 32,
    TensorProto.UINT64: 64, TensorProto.COMPLEX64: 64, TensorProto.COMPLEX128: 128,
    TensorProto.BFLOAT16: 16, 17: 8, 18: 8, 19: 8, 20: 8,  # the four FLOAT8 types
    21: 4, 22: 4, 23: 4,  # UINT4, INT4, FLOAT4E2M1
    24: 8,  # FLOAT8E8M0
    25: 2, 26: 2,  # UINT2, INT2
    27: 6, 28: 6,  # FLOAT6E2M3, FLOAT6E3M2
}

_MATMUL_OPS = frozenset({"MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"})
_CONV_OPS = frozenset({"Conv", "ConvInteger", "QLinearConv"})
_SMALL_CONSTANT_ELEMENTS = 1024  # integer initializers kept for data propagation (shapes, axes)
_MAX_BYTES = 2**62               # Graph's limit on a node's bytes


def tensor_bytes(elem_type: int, shape, what: str) -> int:
    """Bytes of a dense tensor; `GraphError(what ...)` for an unknown type or a bad dimension."""
    bits = ELEMENT_BITS.get(elem_type)
    if bits is None:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise GraphError(f"{what} has unknown element type {name}")
    n = 1
    for d in shape:
        if d < 0:
            raise GraphError(f"{what} has a negative dimension {d}")
        n *= d
        if n >= _MAX_BYTES:
            raise GraphError(f"{what} is too large ({list(shape)})")
    return packed_bytes(n, bits)


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
        raise GraphError(f"{source}: no such file") from None
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


# ---------------------------------------------------------------------- shape inference
def _substitute(value_infos, dims: Mapping[str, int], source: str, required: bool) -> None:
    """Give `dim_param`s their values from `dims`, in place. A parameter that is an expression
    of named dims (exporters write `Min(512, sequence)`, `2*batch`) is evaluated. With
    `required` (graph inputs) a dimension left without a value is an error; elsewhere it is
    cleared, for shape inference to fill in."""
    for vi in value_infos:
        t = vi.type
        tt = t.tensor_type if t.HasField("tensor_type") else (
            t.sparse_tensor_type if t.HasField("sparse_tensor_type") else None)
        if tt is None or not tt.HasField("shape"):
            if required and t.HasField("tensor_type"):
                raise GraphError(f"{source}: graph input '{vi.name}' has no shape")
            continue
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                continue
            value = eval_dim(d.dim_param, dims) if d.HasField("dim_param") else None
            if value is not None:
                d.dim_value = value
            elif required and d.HasField("dim_param"):
                raise GraphError(f"{source}: graph input '{vi.name}' has symbolic dimension "
                                 f"'{d.dim_param}' without a value: pass dims={{'{d.dim_param}': ...}}")
            elif required:
                raise GraphError(f"{source}: graph input '{vi.name}': dimension {k} is unknown")
            else:
                d.Clear()


def _inference_model(model: onnx.ModelProto, order: list[int], dims: Mapping[str, int],
                     base_dir: str | None, source: str) -> onnx.ModelProto:
    """A copy for shape inference: nodes sorted, dims substituted, large weights left out."""
    g = model.graph
    m = onnx.ModelProto(ir_version=model.ir_version)
    m.opset_import.extend(model.opset_import)
    ig = m.graph
    ig.name = g.name
    ig.node.extend(g.node[i] for i in order)
    init_names = set()
    for t in g.initializer:
        init_names.add(t.name)
        ig.initializer.append(_shape_only(t, base_dir))
    ig.sparse_initializer.extend(g.sparse_initializer)
    ig.input.extend(g.input)
    ig.output.extend(g.output)
    ig.value_info.extend(g.value_info)
    _substitute([vi for vi in ig.input if vi.name not in init_names], dims, source, required=True)
    _substitute(ig.output, dims, source, required=False)
    _substitute(ig.value_info, dims, source, required=False)
    return m


def _shape_only(t: TensorProto, base_dir: str | None) -> TensorProto:
    """The initializer as shape inference needs it: small integer tensors with their values
    (read from external data if need be), everything else with dims and type only."""
    small_int = t.data_type in (TensorProto.INT64, TensorProto.INT32) and math.prod(t.dims) <= _SMALL_CONSTANT_ELEMENTS
    if small_int and t.data_location != TensorProto.EXTERNAL:
        return t
    out = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
    if small_int and base_dir is not None:
        from onnx.external_data_helper import load_external_data_for_tensor
        full = TensorProto()
        full.CopyFrom(t)
        try:
            load_external_data_for_tensor(full, base_dir)
            full.data_location = TensorProto.DEFAULT
            del full.external_data[:]
            return full
        except Exception:  # noqa: BLE001 - a missing or bad data file: the shape may stay unknown
            pass
    return out


def _infer(m: onnx.ModelProto, source: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError,
            ValueError, TypeError) as e:
        raise GraphError(f"{source}: ONNX shape inference failed: {_one_line(e)}") from None


def _types(m: onnx.ModelProto) -> dict[str, Any]:
    """name -> TypeProto for every tensor shape inference knows."""
    types = {}
    for vi in (*m.graph.input, *m.graph.value_info, *m.graph.output):
        types[vi.name] = vi.type
    return types


def _shape_of(t, what: str) -> tuple[int, tuple[int, ...]]:
    """(element type, static shape) of a TypeProto; GraphError if unknown or symbolic."""
    kind = t.WhichOneof("value")
    if kind == "optional_type":
        return _shape_of(t.optional_type.elem_type, what)
    if kind not in ("tensor_type", "sparse_tensor_type"):
        raise GraphError(f"{what} is a {kind or 'value of unknown type'}, not a tensor")
    tt = getattr(t, kind)
    if not tt.HasField("shape"):
        raise GraphError(f"{what} has an unknown shape after ONNX shape inference")
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        elif d.HasField("dim_param"):
            raise GraphError(f"{what} has a data-dependent or symbolic dimension '{d.dim_param}'")
        else:
            raise GraphError(f"{what} has an unknown dimension after ONNX shape inference")
    return tt.elem_type, tuple(shape)


# ---------------------------------------------------------------------- building
class _Builder:
    """Records for Graph.from_records, and each ONNX tensor's producing regal nodes."""

    def __init__(self, source: str):
        self.source = source
        self.records: list[dict] = []
        self.ids: set[str] = set()
        self.leaves: dict[str, tuple[int, ...]] = {}   # tensor name -> regal node indices
        self.shapes: dict[str, tuple[int, ...]] = {}   # tensor name -> static shape
        self.nbytes: dict[str, int] = {}               # tensor name -> bytes

    def new_id(self, *candidates: str) -> str:
        base = next((c for c in candidates if c), "node")
        nid, k = base, 1
        while nid in self.ids:
            k += 1
            nid = f"{base}#{k}"
        self.ids.add(nid)
        return nid

    def add(self, rec: dict, outputs: list[str]) -> None:
        for o in outputs:
            self.leaves[o] = (len(self.records),)
        self.records.append(rec)

    def resident(self, name: str, op: str, elem_type: int, shape, what: str) -> None:
        nbytes = tensor_bytes(elem_type, shape, f"{self.source}: {what}")
        self.shapes[name], self.nbytes[name] = tuple(shape), nbytes
        self.add({"id": self.new_id(name), "op": op, "bytes": nbytes, "resident": True}, [name])

    def inputs_of(self, names) -> list[int]:
        out: dict[int, None] = {}
        for x in names:
            if x:
                out.update(dict.fromkeys(self.leaves[x]))
        return list(out)


def _add_weights_and_inputs(b: _Builder, graph: onnx.GraphProto, types) -> None:
    for t in graph.initializer:
        b.resident(t.name, "initializer", t.data_type, t.dims, f"initializer '{t.name}'")
    for st in graph.sparse_initializer:
        name = st.values.name
        vb = tensor_bytes(st.values.data_type, st.values.dims, f"{b.source}: sparse initializer '{name}'")
        ib = tensor_bytes(st.indices.data_type, st.indices.dims, f"{b.source}: sparse initializer '{name}'")
        b.shapes[name], b.nbytes[name] = tuple(st.dims), vb + ib
        b.add({"id": b.new_id(name), "op": "initializer", "bytes": vb + ib, "resident": True}, [name])
    for vi in graph.input:
        if vi.name in b.leaves:
            continue  # an initializer also listed as an input (IR < 4): one weight
        elem, shape = _shape_of(types.get(vi.name, vi.type), f"{b.source}: graph input '{vi.name}'")
        b.resident(vi.name, "input", elem, shape, f"graph input '{vi.name}'")


def _add_node(b: _Builder, node: onnx.NodeProto, i: int, types) -> bool:
    """Add one ONNX node; True if it was folded into its producer."""
    what = f"{b.source}: {_label(node, i)}"
    outs = [o for o in node.output if o]
    out_bytes = 0
    for o in outs:
        if o not in types:
            raise GraphError(f"{what}: output '{o}' has an unknown shape after ONNX shape inference")
        elem, shape = _shape_of(types[o], f"{what}: output '{o}'")
        b.shapes[o] = shape
        b.nbytes[o] = tensor_bytes(elem, shape, f"{what}: output '{o}'")
        out_bytes += b.nbytes[o]
    if node.op_type in FOLDED_OPS and node.domain in ("", "ai.onnx") and len(outs) == 1 and node.input \
            and node.input[0]:
        leaves = dict.fromkeys(b.leaves[node.input[0]])
        for x in node.input[1:]:
            if x:
                leaves.update(dict.fromkeys(b.leaves[x]))
        b.leaves[outs[0]] = tuple(leaves)
        return True
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
    nid = b.new_id(node.name, outs[0] if outs else "", f"{node.op_type}_{i}")
    if node.op_type == "Constant" and not node.input:
        b.add({"id": nid, "op": op, "bytes": out_bytes, "resident": True}, outs)
        return False
    moved = out_bytes + sum(b.nbytes[x] for x in dict.fromkeys(node.input) if x)
    cost = roofline(_flops(node, b.shapes), moved)
    rec = {"id": nid, "op": op, "bytes": out_bytes, "inputs": b.inputs_of(node.input), "cost": cost}
    reuse = _reuse(b, node, outs)
    if reuse:
        rec["reuse"] = reuse
    b.add(rec, outs)
    return False


def _reuse(b: _Builder, node: onnx.NodeProto, outs: list[str]) -> list[int]:
    """An elementwise op's inputs of the output's shape and size, produced by one real node: the
    buffers it may write its output over (SPEC.md section 3 decides per schedule)."""
    if node.op_type not in ELEMENTWISE_OPS or node.domain not in ("", "ai.onnx") or len(outs) != 1:
        return []
    out = outs[0]
    found: list[int] = []
    for x in dict.fromkeys(node.input):
        if x and b.shapes.get(x) == b.shapes[out] and b.nbytes.get(x) == b.nbytes[out] and len(b.leaves[x]) == 1:
            u = b.leaves[x][0]
            if not b.records[u].get("resident") and b.records[u]["bytes"] == b.nbytes[out] and u not in found:
                found.append(u)
    return found


def _flops(node: onnx.NodeProto, shapes: Mapping[str, tuple]) -> float:
    ins = [shapes.get(x) if x else None for x in node.input]
    out = shapes.get(node.output[0]) if node.output and node.output[0] else None
    op = node.op_type
    if op in _MATMUL_OPS and ins:
        return matmul_flops(ins[0], out)  # input 0 is the left operand in every form
    if op == "Gemm" and ins and ins[0] and len(ins[0]) == 2:
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        return matmul_flops(ins[0], out, contract_dim=0 if trans_a else 1)
    if op in _CONV_OPS:
        w = 3 if op == "QLinearConv" else 1
        return conv_flops(out, ins[w] if len(ins) > w else None)
    if op == "ConvTranspose" and len(ins) > 1:
        return conv_transpose_flops(ins[0], ins[1])
    return 0.0


def _check_dims(dims, source: str) -> dict[str, int]:
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise GraphError(f"{source}: dims must be a mapping name -> int, got {type(dims).__name__}")
    for k, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GraphError(f"{source}: dims['{k}'] must be a non-negative integer, got {v!r}")
    return dict(dims)


def load_onnx(path_or_model, dims: Mapping[str, int] | None = None, name: str | None = None) -> Graph:
    """Import an ONNX model (a `.onnx` or `.onnx.gz` path, its bytes, or an `onnx.ModelProto`).

    `dims` gives values to symbolic dimensions (`{"batch": 8}`); `name` defaults to the file
    name without `.onnx[.gz]` (else the graph's name). See the module docstring for what each
    part of the model becomes; every failure is a one-line `GraphError`.
    """
    model, source, base_dir = _read(path_or_model)
    dims = _check_dims(dims, source)
    opset = _check_opset(model, source)
    model = _inline_functions(model, source)
    graph = model.graph
    _reject_subgraphs(graph.node, source)
    defined = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    defined |= {st.values.name for st in graph.sparse_initializer}
    for x in (*defined, *(vi.name for vi in graph.output), model.producer_name, model.producer_version):
        if not isinstance(x, str):
            raise GraphError(f"{source}: the name {x!r} is not valid UTF-8")
    order = _sorted_nodes(graph, defined, source)
    for t in graph.initializer:  # element types and dims checked before shape inference sees them
        tensor_bytes(t.data_type, t.dims, f"{source}: initializer '{t.name}'")
    inferred = _infer(_inference_model(model, order, dims, base_dir, source), source)
    types = _types(inferred)

    b = _Builder(source)
    _add_weights_and_inputs(b, graph, types)
    folded = 0
    for i in order:
        folded += _add_node(b, graph.node[i], i, types)
    if not b.records:
        raise GraphError(f"{source}: the model has no nodes, initializers or inputs")
    outputs = {}
    for vi in graph.output:
        if vi.name not in b.leaves:
            raise GraphError(f"{source}: graph output '{vi.name}' is not produced by any node")
        outputs[vi.name] = [b.records[v]["id"] for v in b.leaves[vi.name]]
    mark_outputs(b.records, [v for vi in graph.output for v in b.leaves[vi.name]])
    ids = [r["id"] for r in b.records]
    for r in b.records:
        if "inputs" in r:
            r["inputs"] = [ids[u] for u in r["inputs"]]
        if "reuse" in r:
            r["reuse"] = [ids[u] for u in r["reuse"]]
    init = graph.initializer
    meta = {"source": "onnx", "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "ir_version": model.ir_version, "opset": opset, "onnx_nodes": len(graph.node),
            "folded": folded, "dims": dims, "outputs": outputs,
            "num_parameters": sum(math.prod(t.dims) for t in init),
            "parameter_bytes": sum(b.nbytes[t.name] for t in init), "cost_model": dict(COST_MODEL)}
    if name is None:
        base = os.path.basename(source)
        for ext in (".gz", ".onnx"):
            base = base[:-len(ext)] if base.endswith(ext) else base
        name = base if base and base != source else (graph.name or "onnx")
    return Graph.from_records(b.records, name=name, meta=meta, source=source)
