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

The package: `ops` (the ops and element types known, `tensor_bytes`), `read` (the file, its
checks and order), `shapes` (shape inference), `build` (nodes -> records); `load_onnx` runs them.
"""

from __future__ import annotations

import math
import os
from typing import Mapping

from regal._ops import COST_MODEL
from regal.graph import Graph, GraphError, mark_outputs
from regal.onnx.build import _add_node, _add_weights_and_inputs, _Builder
from regal.onnx.ops import CONTROL_FLOW_OPS, ELEMENT_BITS, ELEMENTWISE_OPS, FOLDED_OPS, TESTED_OPSETS, tensor_bytes
from regal.onnx.read import _check_opset, _inline_functions, _read, _reject_subgraphs, _sorted_nodes
from regal.onnx.shapes import _infer, _inference_model, _types

__all__ = ["CONTROL_FLOW_OPS", "ELEMENT_BITS", "ELEMENTWISE_OPS", "FOLDED_OPS", "TESTED_OPSETS", "load_onnx", "tensor_bytes"]


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
    return import_with_ids(path_or_model, dims, name)[0]


def import_with_ids(path_or_model, dims: Mapping[str, int] | None = None, name: str | None = None):
    """`load_onnx`'s work: (graph, the model as imported (its local functions inlined), each ONNX
    node's position -> its regal node's id, for the nodes that are not folded)."""
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
    return Graph.from_records(b.records, name=name, meta=meta, source=source), model, b.node_ids
