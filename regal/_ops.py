"""The cost model shared by the ONNX and PyTorch importers (`regal.onnx`, `regal.torch`).

`cost` (seconds, SPEC.md section 4: used by the timed model only) is the roofline of a nominal
device, the same one `regal.hlo.COST_MODEL` describes, so graphs from every importer are on
one scale:

    cost = max(flops / 100e12 FLOP/s, bytes moved / 1e12 B/s)

`bytes moved` is the node's distinct input tensors plus its outputs. FLOPs are counted only
for the contractions, where compute can dominate: `2 * prod(out) * K` for a matrix product
with contraction length K, `2 * prod(out) * prod(weight[1:])` for a convolution (weight
`[C_out, C_in/groups, k...]`), `2 * prod(in) * prod(weight[1:])` for a transposed one. Every
other op is bandwidth-bound on this device (a FLOP per element would never win against at
least one byte per element), so its FLOPs are taken as 0. A rough feature, not a measurement.

`eval_dim` gives a symbolic dimension its value: exporters write sympy expressions of the
named dimensions (`Min(512, sequence)`, `2*batch`) into ONNX value infos.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Mapping, Sequence

__all__ = ["COST_MODEL", "conv_flops", "conv_transpose_flops", "eval_dim", "matmul_flops", "packed_bytes", "roofline"]

PEAK_FLOPS_PER_S = 100e12
BANDWIDTH_BYTES_PER_S = 1e12
_MAX_VALUE = 2**62  # Graph's limit on bytes; a larger dimension is rejected

#: Stored in every imported graph's `meta["cost_model"]`.
COST_MODEL = {"peak_flops_per_s": PEAK_FLOPS_PER_S, "bandwidth_bytes_per_s": BANDWIDTH_BYTES_PER_S,
              "rule": "max(flops/peak, (input bytes + output bytes)/bandwidth); matmul 2*out*K, "
                      "conv 2*out*prod(weight[1:]), conv-transpose 2*in*prod(weight[1:]), else 0 flops"}


def roofline(flops: float, bytes_moved: int) -> float:
    """Seconds on the nominal device: the larger of compute time and memory time."""
    return max(flops / PEAK_FLOPS_PER_S, bytes_moved / BANDWIDTH_BYTES_PER_S)


def packed_bytes(num_elements: int, bits: int) -> int:
    """Bytes of `num_elements` elements of `bits` bits each; sub-byte types pack."""
    return (num_elements * bits + 7) // 8


def matmul_flops(lhs_shape: Sequence[int] | None, out_shape: Sequence[int] | None,
                 contract_dim: int = -1) -> float:
    """2 * prod(out) * K, K = lhs_shape[contract_dim]; 0 when a shape is unknown or a vector."""
    if not lhs_shape or out_shape is None:
        return 0.0
    return 2.0 * math.prod(out_shape) * lhs_shape[contract_dim]


def conv_flops(out_shape: Sequence[int] | None, weight_shape: Sequence[int] | None) -> float:
    """2 * prod(out) * prod(weight[1:]) for weight `[C_out, C_in/groups, k...]`."""
    if out_shape is None or not weight_shape:
        return 0.0
    return 2.0 * math.prod(out_shape) * math.prod(weight_shape[1:])


def conv_transpose_flops(in_shape: Sequence[int] | None, weight_shape: Sequence[int] | None) -> float:
    """2 * prod(in) * prod(weight[1:]) for weight `[C_in, C_out/groups, k...]`."""
    return conv_flops(in_shape, weight_shape)


# Functions that exporters (sympy, via torch.export) write in symbolic dimensions.
_DIM_FUNCS = {"Min": min, "Max": max, "min": min, "max": max, "Abs": abs,
              "FloorDiv": operator.floordiv, "CleanDiv": operator.floordiv, "Mod": operator.mod,
              "PythonMod": operator.mod, "floor": math.floor, "ceiling": math.ceil, "FloorToInt": math.floor,
              "CeilToInt": math.ceil, "TruncToInt": math.trunc, "IntTrueDiv": operator.truediv}
_DIM_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def eval_dim(expr: str, dims: Mapping[str, int]) -> int | None:
    """The value of a symbolic dimension: a name in `dims`, or an arithmetic expression of them
    (integers, + - * / // %, the functions in `_DIM_FUNCS`); None if it is neither."""
    if expr in dims:
        return dims[expr]
    if not dims or len(expr) > 200:
        return None
    try:
        value = _eval_node(ast.parse(expr, mode="eval").body, dims)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, KeyError, RecursionError,
            MemoryError):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value if 0 <= value < _MAX_VALUE else None


def _eval_node(n, dims):
    if isinstance(n, ast.Constant) and type(n.value) in (int, float):
        return n.value
    if isinstance(n, ast.Name):
        return dims[n.id]
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        return -_eval_node(n.operand, dims)
    if isinstance(n, ast.BinOp) and type(n.op) in _DIM_BINOPS:
        value = _DIM_BINOPS[type(n.op)](_eval_node(n.left, dims), _eval_node(n.right, dims))
        if abs(value) >= _MAX_VALUE:
            raise OverflowError
        return value
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _DIM_FUNCS and not n.keywords:
        return _DIM_FUNCS[n.func.id](*(_eval_node(a, dims) for a in n.args))
    raise ValueError("not a dimension expression")
