"""The computation graph as flat arrays, and the `regal-graph/1` file format (SPEC.md section 1).

A `Graph` is built once (from a file, from networkx, or from a list of node records) and is
then shared, read-only, by every solver. Nodes are indexed `0..num_nodes-1` in file order; that
index is the tie-breaker of the decoder (SPEC.md section 5). Edges are stored as CSR arrays:

    in_ptr:  int64[num_nodes + 1]   data inputs of node v are in_idx[in_ptr[v]:in_ptr[v+1]]
    in_idx:  int32[num_data_edges]  (in the order the file lists them)
    out_ptr, out_idx                 data consumers, the transpose of the above
    ctrl_in_ptr, ctrl_in_idx         control (ordering-only) inputs
    ctrl_out_ptr, ctrl_out_idx       their transpose
    pred_ptr, pred_idx               data and control inputs together, without repeats
    succ_ptr, succ_idx               their transpose (what Kahn's algorithm walks)
    reuse_ptr, reuse_idx             the data inputs whose buffer each node may take over (field
                                     `reuse`, SPEC.md section 3), in preference order
    output                           bool[num_nodes]: the graph returns it (field `output`): its home
                                     copy is never freed, though it has consumers (SPEC.md section 3)

Every validation failure raises `GraphError` with a one-line message that names the node.

The package: `records` (node records checked, CSR arrays, `GraphError`), `core` (`Graph`), `io`
(files and networkx).
"""

from __future__ import annotations

from regal.graph.core import GRAPH_FORMAT, Graph
from regal.graph.io import from_json, from_networkx, load, save, to_networkx
from regal.graph.records import MAX_TOTAL_BYTES, GraphError, csr, check_devices, mark_outputs  # noqa: F401

__all__ = ["GRAPH_FORMAT", "MAX_TOTAL_BYTES", "Graph", "GraphError", "check_devices", "load", "save", "from_json",
           "from_networkx", "to_networkx", "mark_outputs"]
