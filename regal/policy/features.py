"""Node and edge features of a graph for the policy, padded to power-of-two buckets (jraph-style).

NumPy only: building features never imports JAX. `GraphBatch` is a NamedTuple of flat arrays;
padding nodes and edges are masked out, and padded edges point at the last (padding) node, so
`jit` compiles once per (node bucket, edge bucket) pair: O(log N) times over any data set.

Node features (float32[N, NUM_NODE_FEATURES]), each roughly in [0, 1]:
    log bytes, log temp bytes, log cost (ns), resident, log in/out degree (data), log control
    in/out degree, topological depth from the sources and to the sinks (fractions of the graph's
    depth), share of total bytes, bytes relative to the largest tensor, log bytes of all inputs,
    lifetime span (levels from the node to its last consumer, as a fraction of the depth),
    is a graph output, log2(devices) / 3, log graph size, log depth.
Structural features (zero when `structure=False`, an ablation): the node's position in a
depth-first schedule (`regal.structure.dfs_order`, as a fraction of n), and a one-hot of its part
in a METIS partition into `devices` parts (`regal.structure.metis_placement`, seed 0; four
columns). They are not in REGAL's paper: they tell the policy where a memory-friendly schedule
and a cut-minimising placement would put each node, which the heads can then turn into priors.
Op type: int32[N] index into OP_VOCAB (unknown ops share the last bucket).
Edges: senders/receivers int32[E] (data and control edges), edge features float32[E, 2]:
    log bytes moved, is control.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regal.graph import Graph
from regal.structure import dfs_order, metis_placement

__all__ = ["GraphBatch", "OP_VOCAB", "NUM_NODE_FEATURES", "NUM_EDGE_FEATURES", "build", "bucket"]

OP_VOCAB = (
    "parameter", "constant", "fusion:kLoop", "fusion:kInput", "fusion:kOutput", "fusion:kCustom",
    "dot", "convolution", "add", "subtract", "multiply", "divide", "maximum", "minimum", "reduce",
    "broadcast", "reshape", "transpose", "copy", "select", "compare", "exponential", "log", "tanh",
    "rsqrt", "sqrt", "negate", "convert", "dynamic-slice", "dynamic-update-slice", "concatenate",
    "slice", "pad", "while", "conditional", "call", "custom-call", "iota", "reduce-window",
    "select-and-scatter", "scatter", "gather", "sort", "all-reduce", "rng-bit-generator",
    "logistic", "abs", "power", "and", "or", "op", "<other>",
)
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCAB)}
NUM_BASE_FEATURES = 18
NUM_PART_FEATURES = 4
NUM_NODE_FEATURES = NUM_BASE_FEATURES + 1 + NUM_PART_FEATURES
NUM_EDGE_FEATURES = 2
_LOG_SCALE = 1.0 / 25.0  # log1p(bytes) of a 1 GiB tensor is ~20.8


class GraphBatch(NamedTuple):
    """One padded graph (N = node bucket, E = edge bucket)."""
    nodes: np.ndarray       # float32[N, NUM_NODE_FEATURES]
    op_ids: np.ndarray      # int32[N]
    edges: np.ndarray       # float32[E, NUM_EDGE_FEATURES]
    senders: np.ndarray     # int32[E]  producer of each edge
    receivers: np.ndarray   # int32[E]  consumer of each edge
    node_mask: np.ndarray   # bool[N]   True for real nodes
    edge_mask: np.ndarray   # bool[E]   True for real edges
    seq_order: np.ndarray   # int32[N]  nodes in a topological order, then the padding (GAS reads it)


def bucket(x: int, minimum: int = 64) -> int:
    """The smallest power of two >= max(x, minimum)."""
    return max(minimum, 1 << max(0, int(x - 1).bit_length()))


def op_index(op: str) -> int:
    if op in _OP_INDEX:
        return _OP_INDEX[op]
    base = op.split(":")[0]
    return _OP_INDEX.get(base, len(OP_VOCAB) - 1)


def build(graph: Graph, devices: int, structure: bool = True) -> GraphBatch:
    """Features of `graph` for a policy deciding over `devices` devices, padded."""
    n = graph.num_nodes
    order = graph.topological_order()
    src_level, sink_level = graph.levels()
    depth = max(1, int(src_level.max() + 1))
    b = graph.bytes.astype(np.float64)
    in_deg = np.diff(graph.in_ptr)
    out_deg = np.diff(graph.out_ptr)
    node_of_edge = np.repeat(np.arange(n), in_deg)
    in_bytes = np.bincount(node_of_edge, weights=b[graph.in_idx], minlength=n)
    # levels between a node and its last consumer: how long its output must live at least
    last_use = src_level.copy()
    if graph.in_idx.size:
        np.maximum.at(last_use, graph.in_idx, src_level[node_of_edge])
    total = max(1.0, b.sum())
    feats = np.stack([
        np.log1p(b) * _LOG_SCALE,
        np.log1p(graph.temp_bytes.astype(np.float64)) * _LOG_SCALE,
        np.log1p(graph.cost * 1e9) * _LOG_SCALE,
        graph.resident.astype(np.float64),
        np.log1p(in_deg) / 4.0,
        np.log1p(out_deg) / 4.0,
        np.log1p(np.diff(graph.ctrl_in_ptr)) / 4.0,
        np.log1p(np.diff(graph.ctrl_out_ptr)) / 4.0,
        src_level / depth,
        sink_level / depth,
        b / total * 10.0,
        b / max(1.0, b.max()),
        np.log1p(in_bytes) * _LOG_SCALE,
        (last_use - src_level) / depth,
        (out_deg == 0).astype(np.float64),
        np.full(n, np.log2(devices) / 3.0),
        np.full(n, np.log1p(n) / 12.0),
        np.full(n, np.log1p(depth) / 12.0),
    ], axis=1)
    extra = np.zeros((n, 1 + NUM_PART_FEATURES))
    if structure:
        extra[dfs_order(graph), 0] = np.arange(n) / max(1, n - 1)
        if devices > 1:
            part = metis_placement(graph, devices, seed=0)
            keep = part < NUM_PART_FEATURES
            extra[np.flatnonzero(keep), 1 + part[keep]] = 1.0
    feats = np.concatenate([feats, extra], axis=1)
    assert feats.shape[1] == NUM_NODE_FEATURES

    # edges: data edges then control edges, producer -> consumer
    d_src = graph.in_idx.astype(np.int32)
    d_dst = node_of_edge.astype(np.int32)
    c_src = graph.ctrl_in_idx.astype(np.int32)
    c_dst = np.repeat(np.arange(n), np.diff(graph.ctrl_in_ptr)).astype(np.int32)
    senders = np.concatenate([d_src, c_src])
    receivers = np.concatenate([d_dst, c_dst])
    efeat = np.zeros((senders.shape[0], NUM_EDGE_FEATURES))
    efeat[:, 0] = np.log1p(b[senders]) * _LOG_SCALE
    efeat[d_src.shape[0]:, 1] = 1.0
    efeat[d_src.shape[0]:, 0] = 0.0

    N = bucket(n + 1)  # at least one padding node to receive padded edges
    E = bucket(senders.shape[0])
    nodes = np.zeros((N, NUM_NODE_FEATURES), dtype=np.float32)
    nodes[:n] = feats
    op_ids = np.full(N, len(OP_VOCAB) - 1, dtype=np.int32)
    op_ids[:n] = [op_index(op) for op in graph.ops]
    edges = np.zeros((E, NUM_EDGE_FEATURES), dtype=np.float32)
    edges[:senders.shape[0]] = efeat
    snd = np.full(E, N - 1, dtype=np.int32)
    rcv = np.full(E, N - 1, dtype=np.int32)
    snd[:senders.shape[0]] = senders
    rcv[:receivers.shape[0]] = receivers
    node_mask = np.zeros(N, dtype=bool)
    node_mask[:n] = True
    edge_mask = np.zeros(E, dtype=bool)
    edge_mask[:senders.shape[0]] = True
    seq = np.arange(N, dtype=np.int32)
    seq[:n] = order
    return GraphBatch(nodes, op_ids, edges, snd, rcv, node_mask, edge_mask, seq)
