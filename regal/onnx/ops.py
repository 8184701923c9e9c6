"""The ONNX ops and element types the importer knows, and the bytes of a tensor; see `regal.onnx`."""

from __future__ import annotations

from onnx import TensorProto

from regal._ops import packed_bytes
from regal.graph import GraphError


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
