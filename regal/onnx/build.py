"""ONNX nodes -> node records: weights and inputs resident, aliases folded, `reuse`, `cost`;
see `regal.onnx`."""

from __future__ import annotations

from typing import Mapping

import onnx

from regal._ops import conv_flops, conv_transpose_flops, matmul_flops, roofline
from regal.graph import GraphError
from regal.onnx.ops import _CONV_OPS, _MATMUL_OPS, ELEMENTWISE_OPS, FOLDED_OPS, tensor_bytes
from regal.onnx.read import _label
from regal.onnx.shapes import _shape_of


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
        self.node_ids: dict[int, str] = {}             # ONNX node position -> its regal node's id (not folded)

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
    b.node_ids[i] = nid
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
