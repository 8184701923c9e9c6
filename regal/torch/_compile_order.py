"""The order of Inductor's fused kernels, chosen by regal (the scheduler hook of `regal.torch.compile`).

Inductor's scheduler calls `torch._inductor.config._post_fusion_custom_pass(nodes) -> nodes` on
the fused scheduler nodes just before its own peak-memory pass (`reorder_for_peak_memory`).
`order_kernels` builds a regal `Graph` of those nodes with Inductor's own memory planning
information (`torch._inductor.memory.prepare_planning_info`: each buffer's bytes, the nodes
that read it, the graph's freeable inputs and outputs), runs `regal.optimize` on it (SPEC.md
section 3, one device) and returns the nodes in regal's order when Inductor's own estimate
(`estimate_peak_memory`) of that order is no higher than of the order it was given.

The graph: one node per freeable input buffer (a graph input Inductor may free after its last
reader; present before the first kernel: a zero-byte `begin` node has them as control inputs and
is a control input of every kernel), one node per fused kernel whose bytes are its output
buffers that outlive it, with a buffer no kernel reads and the graph does not return as its
`temp_bytes`, data edges from the buffers a kernel reads, control edges for Inductor's ordering
dependencies that move no buffer; a kernel that writes a graph output is an `output`. A kernel
with several outputs keeps all of them until the last reader of any (Inductor frees each on its
own): the model is an upper bound there, and Inductor's estimate decides.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.graph import Graph


class OrderResult(NamedTuple):
    """What the scheduler hook did on one compiled graph (kept in `RegalCompiled.records`)."""
    kernels: int             # fused scheduler nodes
    inductor_bytes: int      # Inductor's estimate of the order it gave the hook
    inductor_best_bytes: int  # the lowest estimate of Inductor's own reordering (given, LPMF, BFS, DFS)
    regal_bytes: int         # Inductor's estimate of regal's order
    regal_model_bytes: int   # regal's own peak (SPEC.md section 3) of its order
    adopted: bool            # the hook returned regal's order
    seconds: float


def kernel_graph_records(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs):
    """(records, freeable): the regal node records of the fused `nodes` (module docstring), with
    the memory planning information Inductor computes for them set on the nodes."""
    from torch._inductor.memory import prepare_planning_info
    _, freeable = prepare_planning_info(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs)
    records = []
    ids = {}
    for name, buf in freeable.items():
        ids[name] = f"in:{name}"
        rec = {"id": ids[name], "op": "input", "bytes": int(buf.mpi_buffer.size_free)}
        if name in graph_outputs:
            rec["output"] = True
        records.append(rec)
    begin_inputs = [r["id"] for r in records]
    records.append({"id": "begin", "op": "begin", "bytes": 0, "control_inputs": begin_inputs})
    kernel_of_buf = {}
    index = {id(n): j for j, n in enumerate(nodes)}
    for i, node in enumerate(nodes):
        for buf in node.get_outputs():
            kernel_of_buf[buf.get_name()] = i
    for i, node in enumerate(nodes):
        kept = temp = 0
        output = False
        for buf in node.get_outputs():
            info = buf.mpi_buffer
            if buf.get_name() in graph_outputs:
                output = True
                kept += int(info.size_alloc)
            elif len(info.succ_nodes - {node}) == 0:
                temp += int(info.size_alloc)
            else:
                kept += int(info.size_alloc)
        inputs = []
        for pb in node.mpi_node.pred_buffers:
            pname = pb.get_name()
            src = ids.get(pname) if pname in freeable else None
            if src is None:
                j = kernel_of_buf.get(pname)
                src = None if j is None or j == i else f"k{j}"
            if src is not None and src not in inputs:
                inputs.append(src)
        control = ["begin"] + [f"k{index[id(p)]}" for p in node.mpi_node.pred_nodes
                               if id(p) in index and f"k{index[id(p)]}" not in inputs]
        rec = {"id": f"k{i}", "op": type(node).__name__, "bytes": kept, "temp_bytes": temp,
               "inputs": inputs, "control_inputs": control}
        if output:
            rec["output"] = True
        records.append(rec)
    return records, freeable


def order_kernels(nodes, evaluations: int, seed: int, time_limit_s: float | None):
    """(the nodes in the order to run them, OrderResult). Needs the scheduler being built
    (`torch._inductor.virtualized.V.graph.scheduler`), as the hook is called."""
    import time

    from torch._inductor.memory import estimate_peak_memory
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    from regal.flagship import optimize

    t0 = time.perf_counter()
    sched = V.graph.scheduler
    graph_inputs = OrderedSet(V.graph.graph_inputs.keys())
    graph_outputs = OrderedSet(V.graph.get_output_names())
    records, freeable = kernel_graph_records(nodes, sched.name_to_buf, sched.name_to_fused_node, graph_inputs,
                                             graph_outputs)
    given, _ = estimate_peak_memory(nodes, freeable, graph_outputs)
    best = _inductor_best(nodes, sched, freeable, graph_outputs, given)
    if len(nodes) < 3:
        return nodes, OrderResult(len(nodes), int(given), best, int(given), -1, False, time.perf_counter() - t0)
    graph = Graph.from_records(records, name="inductor_kernels")
    solution = optimize(graph, 1, budget=evaluations, seed=seed, time_limit_s=time_limit_s)
    kernel_ids = {f"k{i}": i for i in range(len(nodes))}
    order = [nodes[kernel_ids[graph.ids[v]]] for v in np.asarray(solution.order).tolist()
             if graph.ids[v] in kernel_ids]
    found, _ = estimate_peak_memory(order, freeable, graph_outputs)
    adopted = found <= given
    result = OrderResult(len(nodes), int(given), best, int(found), int(solution.peak_bytes), bool(adopted),
                         time.perf_counter() - t0)
    return (order if adopted else nodes), result


def _inductor_best(nodes, sched, freeable, graph_outputs, given: int) -> int:
    """The estimate `reorder_for_peak_memory` would reach from `nodes`: the lowest of the given
    order and its three heuristics (what regal's order is measured against, graph by graph)."""
    from torch._inductor import memory
    best = int(given)
    for method in (memory.topological_sort_lpmf, memory.topological_sort_bfs, memory.topological_sort_dfs):
        try:
            order = (method(nodes, freeable, sched.name_to_buf, graph_outputs) if method is memory.topological_sort_lpmf
                     else method(nodes))
            best = min(best, int(memory.estimate_peak_memory(order, freeable, graph_outputs)[0]))
        except Exception:  # noqa: BLE001 - a heuristic that fails is left out, as Inductor logs and skips it
            continue
    return best
