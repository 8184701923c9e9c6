"""Recomputation baselines (SPEC.md section 3b), one device, over the graph's fixed order.

Each runs the graph's *traced order* (`traced_order`: node order, i.e. the order the framework
traced or the file lists, when it is topological; else the graph's topological order) or an
`order` given, decides which nodes run again, and returns a Solution built by
`regal.solution.make_solution`: its peak is SPEC.md section 3b's, re-simulated, and
info["recompute"] holds count, extra_cost and extra_fraction (zeros when nothing runs again).

- `traced-order` (`solve_traced`): no recomputation, the order as is.
- `checkpoint-sqrt` (`solve_checkpoint_sqrt`): Chen et al.'s sublinear-memory checkpointing
  ("Training Deep Nets with Sublinear Memory Cost", 2016). The k *candidates* are the nodes that
  may run again and have a gap between two consecutive readers in the order (SPEC.md 5b: a
  value read again later, as a forward value is by the backward); every ceil(sqrt(k))-th of
  them in the order (the s-th, 2s-th, ...) is a checkpoint, every other node is *chosen*, and
  `regal.recompute_search.recompute_sequence` (5b's insertion rule) makes each chosen node with
  a gap again before its late readers, a chain of chosen nodes from the checkpoint before it.
- `recompute-pointwise` (`solve_pointwise`): what torch.compile's min-cut partitioner does by
  default: the cheap pointwise ops (`is_pointwise`) are chosen, the rest kept; the same rule
  places their recomputations.

The Moccasin CP-SAT baseline is `regal_baselines.moccasin`. These functions take `devices`
for the registry's signature and refuse anything but 1.
"""

from __future__ import annotations

import math
import time

import numpy as np

from regal.graph import Graph
from regal.hlo.bodies import ELEMENTWISE_OPCODES
from regal.simulate import ScheduleError, check_schedule
from regal.solution import Solution, make_solution

__all__ = ["traced_order", "fixed_order", "is_pointwise", "pointwise_nodes", "candidates", "sqrt_checkpoints",
           "finish", "solve_traced", "solve_checkpoint_sqrt", "solve_pointwise", "POINTWISE_ATEN",
           "POINTWISE_HLO", "POINTWISE_ONNX"]

#: ATen ops (`aten.NAME.overload`; in-place `NAME_` too) that torch tags pointwise: output element
#: i depends on element i of the arguments only. Random ops (dropout, bernoulli) are not here.
POINTWISE_ATEN = frozenset({
    "abs", "acos", "acosh", "add", "addcdiv", "addcmul", "asin", "asinh", "atan", "atan2", "atanh",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "ceil", "clamp", "clamp_max", "clamp_min",
    "copysign", "cos", "cosh", "div", "elu", "elu_backward", "eq", "erf", "erfc", "exp", "exp2", "expm1",
    "floor", "floor_divide", "fmod", "frac", "ge", "gelu", "gelu_backward", "gt", "hardsigmoid",
    "hardsigmoid_backward", "hardswish", "hardswish_backward", "hardtanh", "hardtanh_backward", "isinf",
    "isnan", "le", "leaky_relu", "leaky_relu_backward", "lerp", "log", "log10", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "lt", "masked_fill", "maximum",
    "minimum", "mish", "mish_backward", "mul", "nan_to_num", "ne", "neg", "pow", "reciprocal", "relu",
    "remainder", "round", "rsqrt", "rsub", "sigmoid", "sigmoid_backward", "sign", "silu", "silu_backward",
    "sin", "sinh", "softplus", "softplus_backward", "sqrt", "square", "sub", "tan", "tanh", "tanh_backward",
    "threshold", "threshold_backward", "trunc", "where",
})
#: XLA HLO: a loop fusion (XLA's fusion of elementwise ops) and the elementwise opcodes (the
#: importer's list, `regal.hlo.bodies.ELEMENTWISE_OPCODES`).
POINTWISE_HLO = frozenset({"fusion:kLoop"}) | ELEMENTWISE_OPCODES
#: ONNX default-domain elementwise op types (the same as the importer's `regal.onnx.ops.ELEMENTWISE_OPS`,
#: written out so that this module does not import onnx).
POINTWISE_ONNX = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual",
    "HardSigmoid", "HardSwish", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean",
    "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh",
    "ThresholdedRelu", "Where", "Xor",
})


def is_pointwise(op: str) -> bool:
    """Whether a node's `op` names a pointwise op: an ATen name `aten.NAME[_].overload` with NAME in
    POINTWISE_ATEN (the trailing underscore of an in-place variant dropped), an HLO opcode or
    `fusion:kLoop` (POINTWISE_HLO), or an ONNX op type (POINTWISE_ONNX). The three lists never
    collide (ATen names carry their prefix, ONNX types are capitalized), so the graph's source
    need not be known."""
    if op.startswith("aten."):
        name = op.split(".")[1]
        return name.rstrip("_") in POINTWISE_ATEN if name else False
    return op in POINTWISE_HLO or op in POINTWISE_ONNX


def pointwise_nodes(graph: Graph, order: np.ndarray) -> np.ndarray:
    """bool[n]: the nodes `recompute-pointwise` chooses: a pointwise op (`is_pointwise`), unless it is
    an in-place ATen op (`NAME_`) that writes into state: its first data input resident (a
    parameter, buffer or optimizer state) or itself such a write (an optimizer's `mul_`/`add_`
    chain; running it again would apply the update twice, SPEC.md 3b's `recompute: false`).
    order: a topological order (the writes are followed along it)."""
    n = graph.num_nodes
    chosen = np.fromiter((is_pointwise(op) for op in graph.ops), dtype=bool, count=n)
    writes = np.zeros(n, dtype=bool)
    for v in np.asarray(order).tolist():
        op = graph.ops[v]
        if op.startswith("aten.") and op.split(".")[1].endswith("_"):
            ins = graph.inputs(v)
            writes[v] = ins.shape[0] > 0 and bool(graph.resident[ins[0]] or writes[ins[0]])
    return chosen & ~writes


def traced_order(graph: Graph) -> tuple[np.ndarray, str]:
    """(int32[n], source): node order (0..n-1, the order the framework traced or the file lists) when it
    is topological ("graph"), else the graph's topological order ("topological")."""
    n = graph.num_nodes
    try:
        check_schedule(graph, np.zeros(n, dtype=np.int32), np.arange(n, dtype=np.int32), 1)
        return np.arange(n, dtype=np.int32), "graph"
    except ScheduleError:
        return graph.topological_order().astype(np.int32), "topological"


def fixed_order(graph: Graph, order, method: str) -> tuple[np.ndarray, str]:
    """The order a baseline runs: `traced_order` when `order` is None, else `order` (node ids or
    indices, each node once, topological), checked; ValueError (one line, naming `order`) else."""
    if order is None:
        return traced_order(graph)
    try:
        items = None if isinstance(order, (str, bytes)) else list(order)
    except TypeError:
        items = None
    if items is None:
        raise ValueError(f"{method}: order must be a list of node ids or indices, got {type(order).__name__}")
    if items and all(isinstance(x, str) for x in items):
        index = graph.index
        missing = next((x for x in items if x not in index), None)
        if missing is not None:
            raise ValueError(f"{method}: order names '{missing}', which is not a node of graph '{graph.name}'")
        items = [index[x] for x in items]
    arr = np.asarray(items)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{method}: order must be a list of node ids or indices")
    try:
        _, arr = check_schedule(graph, np.zeros(graph.num_nodes, dtype=np.int32), arr, 1)
    except ScheduleError as e:
        raise ValueError(f"{method}: order: {e}") from None
    return arr, "given"


def check_one_device(devices, method: str) -> None:
    """ValueError (one line) unless devices is 1."""
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices != 1:
        raise ValueError(f"{method} runs on one device (devices=1), got devices={devices!r}")


def check_graph(graph, method: str) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{method}: graph must be a regal.Graph, got {type(graph).__name__}")


def candidates(graph: Graph, order: np.ndarray) -> np.ndarray:
    """int64[k]: the nodes that may run again (SPEC.md 3b: not resident, not a graph output, not
    `recompute: false`) with a gap wider than one step between two consecutive readers in `order`
    (section 5b), in `order`'s order."""
    n = graph.num_nodes
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    may = ~(graph.kept | graph.no_recompute)
    out = []
    for v in np.asarray(order).tolist():
        if may[v]:
            readers = np.sort(pos[graph.consumers(v)])
            if readers.shape[0] > 1 and int(np.diff(readers).max()) > 1:
                out.append(v)
    return np.asarray(out, dtype=np.int64)


def sqrt_checkpoints(graph: Graph, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bool[n] checkpoints, int64[k] candidates): of the k `candidates`, every ceil(sqrt(k))-th in
    the order (1-based: the s-th, 2s-th, ...) is a checkpoint."""
    cand = candidates(graph, order)
    keep = np.zeros(graph.num_nodes, dtype=bool)
    k = cand.shape[0]
    if k:
        s = math.isqrt(k - 1) + 1  # ceil(sqrt(k))
        keep[cand[s - 1::s]] = True
    return keep, cand


def finish(graph: Graph, seq: np.ndarray, method: str, t0: float, info: dict) -> Solution:
    """The Solution of a one-device sequence (make_solution), with info["recompute"] also when
    nothing runs again."""
    sol = make_solution(graph, np.zeros(graph.num_nodes, dtype=np.int32), seq, 1, method=method,
                        seconds=time.perf_counter() - t0, info=info)
    if "recompute" not in sol.info:
        from regal.recompute import op_costs
        sol.info["recompute"] = {"count": 0, "extra_cost": 0.0, "extra_fraction": 0.0,
                                 "cost_model": op_costs(graph)[1]}
    return sol


def _recompute(graph: Graph, order: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    from regal.recompute_search import recompute_sequence
    return recompute_sequence(graph, order, chosen)


def solve_traced(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                 order=None) -> Solution:
    """`traced-order`: the graph's traced order (or `order`) run as is, no recomputation.
    info: order_source ("graph", "topological" or "given")."""
    t0 = time.perf_counter()
    check_graph(graph, "traced-order")
    check_one_device(devices, "traced-order")
    order, source = fixed_order(graph, order, "traced-order")
    return finish(graph, order, "traced-order", t0, {"order_source": source})


def solve_checkpoint_sqrt(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                          order=None) -> Solution:
    """`checkpoint-sqrt`: Chen et al.'s sqrt(n) checkpoints over the traced order (module
    docstring). info: order_source, candidates (k), checkpoints (ceil(sqrt(k))-th of them: their
    count), stride (ceil(sqrt(k)))."""
    t0 = time.perf_counter()
    check_graph(graph, "checkpoint-sqrt")
    check_one_device(devices, "checkpoint-sqrt")
    order, source = fixed_order(graph, order, "checkpoint-sqrt")
    keep, cand = sqrt_checkpoints(graph, order)
    k = int(cand.shape[0])
    seq = _recompute(graph, order, ~keep)
    return finish(graph, seq, "checkpoint-sqrt", t0, {
        "order_source": source, "candidates": k, "checkpoints": int(keep.sum()),
        "stride": math.isqrt(k - 1) + 1 if k else 0})


def solve_pointwise(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                    order=None) -> Solution:
    """`recompute-pointwise`: the pointwise ops (`pointwise_nodes`) recomputed where section 5b puts
    them in the traced order. info: order_source, pointwise (how many nodes are pointwise)."""
    t0 = time.perf_counter()
    check_graph(graph, "recompute-pointwise")
    check_one_device(devices, "recompute-pointwise")
    order, source = fixed_order(graph, order, "recompute-pointwise")
    chosen = pointwise_nodes(graph, order)
    seq = _recompute(graph, order, chosen)
    return finish(graph, seq, "recompute-pointwise", t0, {"order_source": source, "pointwise": int(chosen.sum())})
