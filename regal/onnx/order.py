"""A regal solution put to use in ONNX: the model written again with its nodes in the solution's
order (`regal export-onnx MODEL SOLUTION -o ORDERED.onnx`).

An ONNX graph lists its nodes in a topological order, and that list is the only order a model
file can carry. `ordered_model` puts regal's order there: every node regal schedules at its
place in the solution's order; a node regal folds into its producer (an alias: Identity,
Reshape, Flatten, Squeeze, Unsqueeze) right after its inputs. Nothing else changes: names,
initializers, attributes, inputs and outputs are the model's, and its local functions are
inlined as the importer inlines them. The result is checked by `onnx.checker`.

What runs it in that order: ONNX Runtime's sequential executor, with the session's
`execution_order = onnxruntime.ExecutionOrder.PRIORITY_BASED` and its graph optimizations off
(`graph_optimization_level = ORT_DISABLE_ALL`): that order is Kahn's topological sort with the
position in the file breaking ties, which on a file in topological order is the file's order,
except that Shape and Size nodes run as soon as their input exists. Its DEFAULT order is a
reverse depth-first sort from the graph's outputs, whatever the file's order; and graph
optimizations fuse nodes into new ones placed at the end of its node list. Other runtimes: the
file's order is the order a runtime that runs `graph.node` as listed (ONNX's reference
evaluator, `onnx.reference.ReferenceEvaluator`, and many embedded code generators) uses.
"""

from __future__ import annotations

import heapq
import os
from typing import Mapping

import onnx

from regal.graph import GraphError

__all__ = ["ordered_model", "reorder", "export_ordered", "ORT_HINT"]

#: The `metadata_props` key the written model carries, and how to run it in that order.
METADATA_KEY = "regal.order"
ORT_HINT = ("onnxruntime.SessionOptions(): execution_order = ExecutionOrder.PRIORITY_BASED, "
            "graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL")


def ordered_model(path_or_model, solution, dims: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """A copy of the ONNX model (a path, bytes or an `onnx.ModelProto`) whose `graph.node` lists
    the nodes in `solution`'s order (a `regal.Solution` of the graph `regal.load(model,
    dims=dims)` imports; `regal.load_solution(path, graph)` reads a file's). GraphError (one
    line) for a solution of another graph or with recomputations (ONNX runs a node once)."""
    from regal.onnx import import_with_ids
    graph, model, node_ids = import_with_ids(path_or_model, dims)
    return reorder(model, graph, node_ids, solution)


def reorder(model: onnx.ModelProto, graph, node_ids: Mapping[int, str], solution) -> onnx.ModelProto:
    """`ordered_model`'s work on a model as `regal.onnx.import_with_ids` returns it, with its graph and
    each ONNX node's regal id."""
    if tuple(solution.node_ids) != tuple(graph.ids):
        raise GraphError(f"the solution is of graph {solution.graph_name!r}, not of this model's {graph.name!r} "
                         "(import it with the same --dim values)")
    if solution.order.shape[0] > graph.num_nodes:
        raise GraphError("the solution recomputes nodes (its order lists a node again): an ONNX model runs each "
                         "node once; write a solution without recomputation")
    place = {graph.ids[v]: k for k, v in enumerate(solution.order.tolist())}
    nodes = model.graph.node
    keys = [place[node_ids[i]] if i in node_ids else -1 for i in range(len(nodes))]  # folded: at once
    order = _ordered(model.graph, keys)
    want = [graph.index[node_ids[i]] for i in order if i in node_ids]
    got = [v for v in solution.order.tolist() if graph.ids[v] in set(node_ids.values())]
    assert want == got, "the ONNX order does not follow the solution's"
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes[i] for i in order)
    props = {p.key: p.value for p in out.metadata_props}
    props[METADATA_KEY] = (f"nodes in the order of a {solution.method} solution (peak {solution.peak_bytes:,} B on "
                           f"{solution.num_devices} device{'s' if solution.num_devices > 1 else ''}); run in it with "
                           + ORT_HINT)
    del out.metadata_props[:]
    for k, v in props.items():
        out.metadata_props.add(key=k, value=v)
    _check(out)
    return out


def _check(model: onnx.ModelProto) -> None:
    """`onnx.checker.check_model`; a model whose weights are in external files that are not
    there (the shipped models' are not) is checked with its initializers as graph inputs of the
    same type and shape (the checker would read their data). GraphError on a failure."""
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if external:
        light = onnx.ModelProto()
        light.CopyFrom(model)
        inputs = {vi.name for vi in light.graph.input}
        for t in light.graph.initializer:
            if t.name not in inputs:
                light.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        del light.graph.initializer[:]
        model = light
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise GraphError(f"the reordered model fails ONNX's checker ({' '.join(str(e).split())[:300]})") from None


def _ordered(graph: onnx.GraphProto, keys: list[int]) -> list[int]:
    """Node positions in a topological order that takes, among the nodes ready, the one of the
    smallest key (regal's position; -1, a folded node: at once)."""
    producer = {o: i for i, node in enumerate(graph.node) for o in node.output if o}
    succ: list[list[int]] = [[] for _ in graph.node]
    indeg = [0] * len(graph.node)
    for i, node in enumerate(graph.node):
        for j in {producer[x] for x in node.input if x in producer}:
            succ[j].append(i)
            indeg[i] += 1
    ready = [(keys[i], i) for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for k in succ[i]:
            indeg[k] -= 1
            if indeg[k] == 0:
                heapq.heappush(ready, (keys[k], k))
    return order


def export_ordered(model: onnx.ModelProto, out_path) -> None:
    """Write an ordered model to `out_path` (atomically; not compressed: runtimes read plain
    .onnx); GraphError for a .gz path."""
    from regal._io import atomic_binary
    if os.fspath(out_path).endswith(".gz"):
        raise GraphError(f"{os.fspath(out_path)}: write a plain .onnx file (runtimes do not read .onnx.gz)")
    with atomic_binary(out_path) as f:
        f.write(model.SerializeToString())
