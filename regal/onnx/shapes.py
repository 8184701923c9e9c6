"""Shape inference on a shape-only copy of the model, and the type of every value; see `regal.onnx`."""

from __future__ import annotations

import math
from typing import Any, Mapping

import onnx
from onnx import TensorProto

from regal._ops import eval_dim
from regal.graph import GraphError
from regal.onnx.ops import _SMALL_CONSTANT_ELEMENTS
from regal.onnx.read import _one_line


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
