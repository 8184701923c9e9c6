"""What `regal.torch` knows of ATen ops, apart from the graph it builds: which are elementwise
(their output may be written over an input: `reuse`), which have an `out=` variant (so a
plan can make a take-over real), their names, and their FLOPs for the roofline cost."""

from __future__ import annotations

import math

import torch
import torch.fx

from regal._ops import COST_MODEL, conv_flops, matmul_flops

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


_DEVICE_COSTS: dict = {}


def device_cost_model(device) -> dict:
    """The roofline of the device a step runs on (`regal._ops.COST_MODEL`'s fields), measured in a
    tenth of a second: the best FLOP rate of a 256 x 256 float32 matrix product and the best
    bandwidth of a 16 MiB copy, with the threads torch uses now; cached per device and thread
    count. A planned step's recomputations are then costed as that device runs them (the nominal
    100 TFLOP/s and 1 TB/s make a CPU's convolutions look twenty times cheaper than they are).
    Draws nothing from the random generators. `REGAL_COST_MODEL=nominal` in the environment: the
    nominal roofline instead (`regal._ops.COST_MODEL`), the same plan on every machine."""
    import os
    import time
    if os.environ.get("REGAL_COST_MODEL", "measured") == "nominal":
        return dict(COST_MODEL)
    device = torch.device(device)
    key = (str(device), torch.get_num_threads())
    if key in _DEVICE_COSTS:
        return _DEVICE_COSTS[key]

    def best(fn, reps: int) -> float:
        fn()  # a warm-up call (the kernel's first run sets it up)
        out = float("inf")
        for _ in range(3):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            out = min(out, (time.perf_counter() - t) / reps)
        return max(out, 1e-9)

    with torch.no_grad():
        a = torch.full((256, 256), 0.5, device=device)
        c = torch.empty_like(a)
        flops = 2.0 * 256 ** 3 / best(lambda: torch.mm(a, a, out=c), 2)
        x = torch.full((4 << 20,), 1.0, device=device)
        y = torch.empty_like(x)
        bandwidth = 2.0 * x.numel() * 4 / best(lambda: y.copy_(x), 2)
    # each rate to the nearest power of two: the same plan from run to run on one machine, unless
    # its speed moves by more than sqrt(2) (the load of the moment moves a measurement by less)
    flops, bandwidth = (2.0 ** round(math.log2(r)) for r in (flops, bandwidth))
    model = {"peak_flops_per_s": flops, "bandwidth_bytes_per_s": bandwidth,
             "rule": f"measured on {device} ({torch.get_num_threads()} threads): the best of a 256^3 float32 "
                     "matmul and a 16 MiB copy, each rate to the nearest power of two; " + COST_MODEL["rule"]}
    _DEVICE_COSTS[key] = model
    return model
