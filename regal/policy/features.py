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

Feature set "v2" (`build(..., features="v2")`, the default of new policies) means the same on
graphs from every source: no absolute scale anywhere (a graph in KiB and one in GiB, a cost model
in ns or in FLOPs, 300 nodes or 30,000, read alike), and ops by category across frameworks.
    sizes (relative to the graph): bytes as a rank (fraction of nodes with fewer bytes), as a
        fraction of the largest tensor, log2 of its ratio to the median tensor (squashed), as a
        fraction of the lower bound on `devices` devices (SPEC.md section 7); temp bytes over
        the largest tensor; bytes of all inputs as a rank; the cost as a rank;
    structure: resident, graph output, log in/out degree (data, control), depth from the
        sources and to the sinks, lifetime span (fractions of the depth), DFS position and
        METIS part (as in v1);
    graph: log2(devices) / 3, resident share of the graph's bytes, depth / nodes;
    op: the op's category (`OP_CATEGORIES`: HLO opcodes, HLO fusion kinds, ONNX op types, ATen
        operators and layer names all map to the same dozen categories), not its name.
Edges in v2: bytes moved over the largest tensor, is control. `drop` zeroes whole groups
("sizes", "structure", "graph", "op"), for the ablation of what each group is worth.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from regal.graph import Graph
from regal.structure import dfs_order, metis_placement

__all__ = ["GraphBatch", "OP_VOCAB", "OP_CATEGORIES", "FEATURE_SETS", "FEATURE_GROUPS", "NUM_NODE_FEATURES",
           "NUM_EDGE_FEATURES", "build", "bucket", "num_node_features", "op_category", "op_vocab_size"]

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
FEATURE_SETS = ("v1", "v2")

#: v2's op categories, the same for every framework; the last one takes what no rule knows.
OP_CATEGORIES = ("input", "constant", "matmul", "conv", "attention", "normalization", "reduction",
                 "elementwise", "data-movement", "control", "communication", "other")
#: v2's columns per group (NUM_NODE_FEATURES columns in all, the same as v1's)
FEATURE_GROUPS = {"sizes": tuple(range(0, 7)), "structure": tuple(range(7, 16)) + tuple(range(19, 24)),
                  "graph": (16, 17, 18), "op": ()}
_CAT = {c: i for i, c in enumerate(OP_CATEGORIES)}
# ordered: the first rule whose word is among the op's words wins ("convolution_backward" is conv)
_CATEGORY_WORDS = (
    ("input", {"parameter", "initializer", "buffer", "input", "optimizer_state", "argument", "placeholder"}),
    ("constant", {"constant", "iota", "arange", "range", "ones_like", "zeros_like", "full", "empty",
                  "empty_like", "constantofshape", "zeros", "ones", "lift_fresh_copy"}),
    ("attention", {"attention", "scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
                   "_scaled_dot_product_flash_attention_for_cpu_backward", "multiheadattention", "sdpa"}),
    ("conv", {"convolution", "conv", "conv1d", "conv2d", "conv3d", "convtranspose", "conv_transpose2d",
              "convolution_backward", "conv2d_backward", "convtranspose2d", "kcustom"}),
    ("matmul", {"dot", "matmul", "gemm", "mm", "bmm", "addmm", "baddbmm", "linear", "einsum", "dot_general",
                "kout", "koutput"}),
    ("normalization", {"batch_norm", "native_batch_norm", "native_batch_norm_backward", "layer_norm",
                       "native_layer_norm", "native_layer_norm_backward", "group_norm", "native_group_norm",
                       "instance_norm", "rms_norm", "layernormalization", "batchnormalization",
                       "groupnormalization", "instancenormalization", "batchnorm1d", "batchnorm2d",
                       "layernorm", "groupnorm", "rmsnorm", "batch-norm-training", "batch-norm-inference",
                       "batch-norm-grad"}),
    ("reduction", {"reduce", "reduce-window", "select-and-scatter", "sum", "mean", "amax", "amin", "argmax",
                   "argmin", "softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax",
                   "_softmax_backward_data", "reducemean", "reducesum", "reducemax", "globalaveragepool",
                   "maxpool", "averagepool", "max_pool2d", "max_pool2d_with_indices",
                   "max_pool2d_with_indices_backward", "avg_pool2d", "adaptive_avg_pool2d", "avg_pool2d_backward",
                   "adaptive_avg_pool2d_backward", "maxpool2d", "avgpool2d", "adaptiveavgpool2d", "cumsum",
                   "kinput", "sort", "topk", "var", "std", "norm", "logsumexp"}),
    ("control", {"while", "conditional", "call", "custom-call", "loop", "if", "scan", "cond"}),
    ("communication", {"all-reduce", "all-gather", "all-to-all", "reduce-scatter", "collective-permute",
                       "send", "recv", "allreduce"}),
    ("data-movement", {"reshape", "view", "_unsafe_view", "transpose", "permute", "t", "broadcast", "expand",
                       "copy", "clone", "_to_copy", "contiguous", "slice", "concatenate", "concat", "cat",
                       "stack", "split", "split_with_sizes", "chunk", "gather", "scatter", "scatter_add",
                       "gatherelements", "scatterelements", "pad", "constant_pad_nd", "dynamic-slice",
                       "dynamic-update-slice", "reverse", "flip", "squeeze", "unsqueeze", "flatten",
                       "select_backward", "slice_backward", "index", "index_select", "index_put",
                       "embedding", "embedding_dense_backward", "tuple", "get-tuple-element", "bitcast",
                       "shape", "unbind", "narrow", "repeat", "tile", "roll", "detach", "alias",
                       "as_strided", "new_zeros", "flatten", "identity", "resize", "upsample_nearest2d",
                       "upsample_bilinear2d", "interpolate", "pixel_shuffle", "dropout"}),
)
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


def num_node_features(features: str = "v1") -> int:
    """Columns of GraphBatch.nodes for feature set `features`."""
    return NUM_NODE_FEATURES if features == "v1" else NUM_BASE_FEATURES + 1 + 1 + NUM_PART_FEATURES


def _rank(x: np.ndarray) -> np.ndarray:
    """Fraction of the entries strictly below each entry (ties share their lowest rank), in [0, 1)."""
    srt = np.sort(x)
    return np.searchsorted(srt, x, side="left") / max(1, x.shape[0])


def op_vocab_size(features: str = "v1") -> int:
    """Rows of the op embedding for feature set `features`."""
    return len(OP_VOCAB) if features == "v1" else len(OP_CATEGORIES)


@lru_cache(maxsize=4096)
def op_category(op: str) -> int:
    """Index into OP_CATEGORIES of an op name from any importer (HLO, ONNX, ATen, layer names)."""
    name = op.lower()
    if name.startswith("fusion:"):                        # HLO fusion kinds
        kind = name.split(":", 1)[1]
        return _CAT[{"kloop": "elementwise", "kinput": "reduction", "koutput": "matmul",
                     "kcustom": "conv"}.get(kind, "other")]
    if name.startswith("aten."):                          # aten.<op>[_].<overload>
        name = name.split(".")[1]
    words = {name, name.rstrip("_")}
    words.update(w for w in re.split(r"[^a-z0-9_\-]+", name) if w)
    for category, names in _CATEGORY_WORDS:
        if words & names:
            return _CAT[category]
    return _CAT["elementwise"] if _ELEMENTWISE.search(name) else _CAT["other"]


_ELEMENTWISE = re.compile(
    r"add|sub|mul|div|neg|abs|exp|log|sqrt|rsqrt|pow|tanh|sigmoid|logistic|relu|gelu|silu|swish|elu|"
    r"hardtanh|softplus|sin|cos|erf|max|min|clamp|clip|where|select|compare|eq|ne|lt|le|gt|ge|equal|"
    r"greater|less|and|or|not|xor|convert|cast|floor|ceil|round|sign|isnan|is-finite|threshold|"
    r"bernoulli|rng|random|lerp|addcmul|addcdiv|reciprocal|square|fill|masked|mish|remainder|atan|"
    r"expm1|log1p|floor_divide|rsub|sgd|adam|foreach|copysign|power|maximum|minimum|negate|subtract|"
    r"multiply|divide|exponential")


def op_index(op: str) -> int:
    if op in _OP_INDEX:
        return _OP_INDEX[op]
    base = op.split(":")[0]
    return _OP_INDEX.get(base, len(OP_VOCAB) - 1)


def build(graph: Graph, devices: int, structure: bool = True, features: str = "v1",
          drop: tuple = ()) -> GraphBatch:
    """Features of `graph` for a policy deciding over `devices` devices, padded.

    features: "v1" (REGAL's, with absolute scales and HLO op names) or "v2" (source-invariant);
    drop: v2 feature groups to zero (see FEATURE_GROUPS).
    """
    if features not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {features!r}; expected one of {', '.join(FEATURE_SETS)}")
    unknown = set(drop) - set(FEATURE_GROUPS)
    if unknown or (drop and features == "v1"):
        raise ValueError(f"cannot drop feature groups {sorted(drop)} of feature set {features!r}")
    common = _common_columns(graph)
    columns = _v1_columns if features == "v1" else _v2_columns
    feats = np.concatenate([columns(graph, devices, common), _structure_columns(graph, devices, structure)], axis=1)
    assert feats.shape[1] == num_node_features(features)
    for group in drop:
        feats[:, list(FEATURE_GROUPS[group])] = 0.0
    senders, receivers, efeat = _edges(graph, common.node_of_edge, features)
    return _padded(graph, feats, senders, receivers, efeat, features, drop)


class _Common(NamedTuple):
    """What both feature sets compute from the graph (n nodes, E data edges)."""
    node_of_edge: np.ndarray  # int64[E]    the consumer of each data edge
    in_bytes: np.ndarray      # float64[n]  bytes of all of a node's inputs
    degrees: list             # 4 x float64[n]  log in/out degree (data), log control in/out degree
    levels: list              # 2 x float64[n]  depth from the sources and to the sinks (fractions)
    span: np.ndarray          # float64[n]  levels from the node to its last consumer (fraction)
    depth: int                # the graph's depth in levels


def _common_columns(graph: Graph) -> _Common:
    n = graph.num_nodes
    src_level, sink_level = graph.levels()
    depth = max(1, int(src_level.max() + 1))
    in_deg = np.diff(graph.in_ptr)
    node_of_edge = np.repeat(np.arange(n), in_deg)
    in_bytes = np.bincount(node_of_edge, weights=graph.bytes.astype(np.float64)[graph.in_idx], minlength=n)
    # levels between a node and its last consumer: how long its output must live at least
    last_use = src_level.copy()
    if graph.in_idx.size:
        np.maximum.at(last_use, graph.in_idx, src_level[node_of_edge])
    degrees = [np.log1p(in_deg) / 4.0, np.log1p(np.diff(graph.out_ptr)) / 4.0,
               np.log1p(np.diff(graph.ctrl_in_ptr)) / 4.0, np.log1p(np.diff(graph.ctrl_out_ptr)) / 4.0]
    return _Common(node_of_edge, in_bytes, degrees, [src_level / depth, sink_level / depth],
                   (last_use - src_level) / depth, depth)


def _v1_columns(graph: Graph, devices: int, c: _Common) -> np.ndarray:
    """REGAL's columns, with absolute scales: float64[n, NUM_BASE_FEATURES]."""
    n = graph.num_nodes
    b = graph.bytes.astype(np.float64)
    total = max(1.0, b.sum())
    return np.stack([
        np.log1p(b) * _LOG_SCALE,
        np.log1p(graph.temp_bytes.astype(np.float64)) * _LOG_SCALE,
        np.log1p(graph.cost * 1e9) * _LOG_SCALE,
        graph.resident.astype(np.float64),
        *c.degrees, *c.levels,
        b / total * 10.0,
        b / max(1.0, b.max()),
        np.log1p(c.in_bytes) * _LOG_SCALE,
        c.span,
        (np.diff(graph.out_ptr) == 0).astype(np.float64),
        np.full(n, np.log2(devices) / 3.0),
        np.full(n, np.log1p(n) / 12.0),
        np.full(n, np.log1p(c.depth) / 12.0),
    ], axis=1)


def _v2_columns(graph: Graph, devices: int, c: _Common) -> np.ndarray:
    """The source-invariant columns (no absolute scale): float64[n, NUM_BASE_FEATURES + 1]."""
    n = graph.num_nodes
    b = graph.bytes.astype(np.float64)
    biggest = max(1.0, b.max())
    positive = b[b > 0]
    median = float(np.median(positive)) if positive.size else 1.0
    bound = max(1.0, float(graph.lower_bound(devices)))
    return np.stack([
        _rank(b),
        b / biggest,
        np.where(b > 0, np.clip(np.log2(np.maximum(b, 1.0) / median) / 16.0 + 0.5, 0.0, 1.0), 0.0),
        np.minimum(b / bound, 1.0),
        np.minimum(graph.temp_bytes.astype(np.float64) / biggest, 1.0),
        _rank(c.in_bytes),
        _rank(graph.cost.astype(np.float64)),
        graph.resident.astype(np.float64),
        ((np.diff(graph.out_ptr) == 0) & ~graph.resident).astype(np.float64),
        *c.degrees, *c.levels, c.span,
        np.full(n, np.log2(devices) / 3.0),
        np.full(n, b[graph.resident].sum() / max(1.0, b.sum())),
        np.full(n, c.depth / max(1, n)),
    ], axis=1)


def _structure_columns(graph: Graph, devices: int, structure: bool) -> np.ndarray:
    """float64[n, 1 + NUM_PART_FEATURES]: the DFS position and the METIS part (zero without
    `structure`)."""
    n = graph.num_nodes
    extra = np.zeros((n, 1 + NUM_PART_FEATURES))
    if structure:
        extra[dfs_order(graph), 0] = np.arange(n) / max(1, n - 1)
        if devices > 1:
            part = metis_placement(graph, devices, seed=0)
            keep = part < NUM_PART_FEATURES
            extra[np.flatnonzero(keep), 1 + part[keep]] = 1.0
    return extra


def _edges(graph: Graph, node_of_edge: np.ndarray, features: str):
    """(senders, receivers: int32[E], features float64[E, NUM_EDGE_FEATURES]): data edges then
    control edges, producer -> consumer."""
    n = graph.num_nodes
    b = graph.bytes.astype(np.float64)
    d_src = graph.in_idx.astype(np.int32)
    d_dst = node_of_edge.astype(np.int32)
    c_src = graph.ctrl_in_idx.astype(np.int32)
    c_dst = np.repeat(np.arange(n), np.diff(graph.ctrl_in_ptr)).astype(np.int32)
    senders = np.concatenate([d_src, c_src])
    receivers = np.concatenate([d_dst, c_dst])
    efeat = np.zeros((senders.shape[0], NUM_EDGE_FEATURES))
    efeat[:, 0] = np.log1p(b[senders]) * _LOG_SCALE if features == "v1" else b[senders] / max(1.0, b.max())
    efeat[d_src.shape[0]:, 1] = 1.0
    efeat[d_src.shape[0]:, 0] = 0.0
    return senders, receivers, efeat


def _padded(graph: Graph, feats, senders, receivers, efeat, features: str, drop: tuple) -> GraphBatch:
    """The batch padded to power-of-two buckets, padding masked out and padded edges pointing at
    the last (padding) node."""
    n = graph.num_nodes
    N = bucket(n + 1)  # at least one padding node to receive padded edges
    E = bucket(senders.shape[0])
    nodes = np.zeros((N, feats.shape[1]), dtype=np.float32)
    nodes[:n] = feats
    op_ids = np.full(N, op_vocab_size(features) - 1, dtype=np.int32)
    if features == "v1":
        op_ids[:n] = [op_index(op) for op in graph.ops]
    elif "op" not in drop:
        op_ids[:n] = [op_category(op) for op in graph.ops]
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
    seq[:n] = graph.topological_order()
    return GraphBatch(nodes, op_ids, edges, snd, rcv, node_mask, edge_mask, seq)
