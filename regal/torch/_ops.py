"""What `regal.torch` knows of ATen ops, apart from the graph it builds: which are elementwise
(their output may be written over an input: `reuse`), which have an `out=` variant (so a
plan can make a take-over real), their names, and their FLOPs for the roofline cost."""

from __future__ import annotations

import math

import torch
import torch.fx

from regal._ops import conv_flops, matmul_flops

__all__ = ["ELEMENTWISE_ATEN"]


#: ATen ops whose output element i depends only on element i of their tensor arguments (after
#: broadcasting): the output may be written over a same-shape argument (field `reuse`).
ELEMENTWISE_ATEN = frozenset({
    "abs", "add", "addcdiv", "addcmul", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor",
    "ceil", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "div", "elu", "eq", "erf", "exp", "expm1",
    "floor", "gelu", "ge", "gt", "hardsigmoid", "hardswish", "hardtanh", "le", "leaky_relu", "lerp", "log",
    "log1p", "logical_and", "logical_not", "logical_or", "lt", "maximum", "minimum", "mish", "mul", "ne",
    "neg", "pow", "reciprocal", "relu", "remainder", "round", "rsqrt", "sigmoid", "sign", "silu", "sin",
    "sinh", "softplus", "sqrt", "square", "sub", "tan", "tanh", "threshold", "trunc", "where",
    "gelu_backward", "sigmoid_backward", "tanh_backward", "threshold_backward", "silu_backward",
    "hardtanh_backward", "leaky_relu_backward", "elu_backward",
})


def _has_out_variant(target) -> bool:
    """Whether `aten.<op>.out(..., out=)` exists: a take-over a program can then make real."""
    out = getattr(getattr(torch.ops.aten, target._opname, None), "out", None)
    return out is not None and [a.name for a in out._schema.arguments if a.is_out] == ["out"]


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._opname}.{target._overloadname}" if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def _shape(arg):
    if isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor):
        return tuple(int(d) for d in arg.meta["val"].shape)
    return None


def _flops(node: torch.fx.Node) -> float:
    """FLOPs of matrix products, convolutions and attention; 0 for the rest (regal._ops)."""
    name = getattr(node.target, "_opname", "")
    args = node.args
    val = node.meta.get("val")
    out = tuple(val.shape) if isinstance(val, torch.Tensor) else None
    if name in ("mm", "bmm", "matmul", "linear", "_unsafe_mm") and args:
        return matmul_flops(_shape(args[0]), out)
    if name in ("addmm", "baddbmm") and len(args) > 1:
        return matmul_flops(_shape(args[1]), out)
    if name in ("convolution", "conv1d", "conv2d", "conv3d", "_convolution") and len(args) > 1:
        transposed = name in ("convolution", "_convolution") and len(args) > 6 and bool(args[6])
        return conv_flops(_shape(args[0]) if transposed else out, _shape(args[1]))
    if name == "convolution_backward" and len(args) > 2:
        return 2 * conv_flops(_shape(args[0]), _shape(args[2]))  # grad input + grad weight
    if "scaled_dot_product" in name and len(args) > 2:
        q, k = _shape(args[0]), _shape(args[1])
        if q and k:
            return 4.0 * math.prod(q[:-1]) * k[-2] * q[-1]
    return 0.0
