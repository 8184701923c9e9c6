"""The "gnn" policy network's forward pass in NumPy alone, for inference without importing JAX.

`forward(config, params, batch)` computes what `network.make_network(config).apply(params, None,
batch)` does (same parameters: a dict module name -> dict parameter name -> array, NumPy or JAX),
returned as a dict of padded NumPy arrays keyed like the fields of `network.Logits`.
tests/test_policy_numpy.py checks that it equals the Haiku network, head by head. Only kind
"gnn"; the GAS baseline's GRU (kind "gas") stays in JAX.

Equal, not identical: the same float32 arithmetic in another order (differences ~1e-6). For speed,
segment sums over edges sort the real edges once per call and add runs with `np.add.reduceat`,
the padding rows past the last real node skip message passing (they are masked to 0 there), and
the update MLP's first layer multiplies its four input blocks separately (the graph mean once).
The matrices are small: a single BLAS thread (OPENBLAS_NUM_THREADS=1) is fastest on busy cores.
"""

from __future__ import annotations

import numpy as np

from regal.policy.actions import BETA_ACTIONS
from regal.policy.features import GraphBatch
from regal.policy.start_choice import DEFAULT_COLUMN

__all__ = ["forward", "node_states", "move_head"]

_LN_EPS = 1e-5  # hk.LayerNorm's default
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))  # a Python float, so float32 stays float32


def _gelu(x: np.ndarray) -> np.ndarray:
    """jax.nn.gelu with its default approximate=True (the tanh form)."""
    inner = x * (_SQRT_2_OVER_PI + (0.044715 * _SQRT_2_OVER_PI) * (x * x))  # sqrt(2/pi) (x + 0.044715 x^3)
    return x * (0.5 + 0.5 * np.tanh(inner))


def _linear(p: dict, x: np.ndarray) -> np.ndarray:
    """hk.Linear: x @ w (+ b)."""
    y = x @ np.asarray(p["w"])
    return y + np.asarray(p["b"]) if "b" in p else y


def _mlp(params: dict, name: str, x: np.ndarray) -> np.ndarray:
    """hk.nets.MLP([h, h], activation=gelu): gelu between the two layers, none after the last."""
    return _linear(params[f"{name}/~/linear_1"], _gelu(_linear(params[f"{name}/~/linear_0"], x)))


def _layer_norm(p: dict, x: np.ndarray) -> np.ndarray:
    """hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return np.asarray(p["scale"]) / np.sqrt(var + _LN_EPS) * (x - mean) + np.asarray(p["offset"])


class _Segments:
    """Sum of per-edge rows into their node: the real edges sorted by `ids`, runs added by reduceat."""

    def __init__(self, ids: np.ndarray, num_nodes: int):
        self.order = np.argsort(ids, kind="stable")
        s = ids[self.order]
        self.starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]]) if len(s) else np.zeros(0, np.int64)
        self.nodes = s[self.starts]
        self.num_nodes = num_nodes

    def sum(self, rows: np.ndarray) -> np.ndarray:  # rows in self.order
        out = np.zeros((self.num_nodes, rows.shape[1]), rows.dtype)
        if len(self.starts):
            out[self.nodes] = np.add.reduceat(rows, self.starts, axis=0)
        return out


def _gnn(cfg, params: dict, batch: GraphBatch) -> np.ndarray:
    real = np.asarray(batch.edge_mask, bool)
    snd, rcv, edges = batch.senders[real], batch.receivers[real], batch.edges[real]
    # rows past the last real node that no real edge touches stay 0 (masked): skip the padding
    last = max(np.flatnonzero(batch.node_mask).max(initial=-1), snd.max(initial=-1), rcv.max(initial=-1))
    num_nodes = int(last) + 1
    nmask = batch.node_mask[:num_nodes, None].astype(np.float32)
    deg_in = np.maximum(np.bincount(rcv, minlength=num_nodes), 1).astype(np.float32)[:, None]
    deg_out = np.maximum(np.bincount(snd, minlength=num_nodes), 1).astype(np.float32)[:, None]
    count = max(float(nmask.sum()), 1.0)
    by_rcv, by_snd = _Segments(rcv, num_nodes), _Segments(snd, num_nodes)
    # each direction's edges in the order its segment sum adds them (padding edges are masked out)
    snd_r, edges_r = snd[by_rcv.order], edges[by_rcv.order]
    rcv_s, edges_s = rcv[by_snd.order], edges[by_snd.order]

    nodes, op_ids = batch.nodes[:num_nodes], batch.op_ids[:num_nodes]
    x = _linear(params["node_in"], nodes) + np.asarray(params["op_embed"]["embeddings"])[op_ids]
    x = _mlp(params, "encoder", _gelu(x)) * nmask
    for r in range(cfg.rounds):
        src = _linear(params[f"msg_fwd_{r}"], x)
        dst = _linear(params[f"msg_bwd_{r}"], x)
        m_in = by_rcv.sum(_gelu(src[snd_r] + _linear(params[f"edge_fwd_{r}"], edges_r))) / deg_in
        m_out = by_snd.sum(_gelu(dst[rcv_s] + _linear(params[f"edge_bwd_{r}"], edges_s))) / deg_out
        g = (x * nmask).sum(axis=0, keepdims=True) / count
        # the update MLP's first layer reads [x, m_in, m_out, g]: one product per block, g's one row
        first = params[f"update_{r}/~/linear_0"]
        w_x, w_in, w_out, w_g = np.split(np.asarray(first["w"]), 4)
        hid = _gelu(x @ w_x + m_in @ w_in + m_out @ w_out + (g @ w_g + np.asarray(first["b"])))
        upd = _linear(params[f"update_{r}/~/linear_1"], hid)
        x = _layer_norm(params[f"norm_{r}"], x + upd) * nmask
    out = np.zeros((batch.nodes.shape[0], x.shape[1]), x.dtype)
    out[:num_nodes] = x
    return out


def _start_scores(config, params: dict, h: np.ndarray, batch: GraphBatch, starts: np.ndarray) -> np.ndarray:
    mask = batch.node_mask[:, None].astype(np.float32)
    pooled = (h * mask).sum(axis=0) / max(float(mask.sum()), 1.0)
    ctx = np.broadcast_to(pooled, (starts.shape[0], pooled.shape[0]))
    hid = _gelu(_linear(params["start_hidden"], np.concatenate([starts, ctx], axis=-1)))
    score = _linear(params["start_score"], hid)[:, 0] + np.float32(config.default_bias) * starts[:, DEFAULT_COLUMN]
    return np.where(starts.sum(axis=-1) != 0, score, np.float32(-1e9))


def node_states(config, params: dict, batch: GraphBatch) -> np.ndarray:
    """float32[N, hidden + features]: what every head reads, the GNN's final node states beside
    the raw node features (padded)."""
    if config.kind != "gnn":
        raise ValueError(f"the NumPy forward covers kind 'gnn' only, not {config.kind!r} "
                         f"(the GRU of kind 'gas' runs in JAX only)")
    return np.concatenate([_gnn(config, params, batch), batch.nodes], axis=-1)


def move_head(params: dict, states: np.ndarray) -> np.ndarray:
    """The move head in NumPy (Haiku's: `network.move_logits`): node and group logits [n, 2]
    (columns `regal.kernels.climb_picks.LOGIT_*`) from `node_states`."""
    return _linear(params["head_moves"], _gelu(_linear(params["moves_hidden"], states)))


def forward(config, params: dict, batch: GraphBatch, starts=None) -> dict[str, np.ndarray]:
    """The padded logits of the "gnn" network of `config` (a PolicyConfig) on `batch`:
    placement [N, max_devices, A], scheduling [N, A], elite [N, B], transfer_priority [N, A]
    and, with `starts` (float32[K, NUM_START_FEATURES]) and a start head, start_scores [K]; with a
    move head, moves [N, 2]."""
    if config.kind != "gnn":
        raise ValueError(f"the NumPy forward covers kind 'gnn' only, not {config.kind!r} "
                         f"(the GRU of kind 'gas' runs in JAX only)")
    A = len(BETA_ACTIONS)
    h = node_states(config, params, batch)
    n = h.shape[0]
    out = {"placement": _linear(params["head_placement"], h).reshape(n, config.max_devices, A),
           "scheduling": _linear(params["head_scheduling"], h),
           "elite": _linear(params["head_elite"], h)}
    out["transfer_priority"] = (_linear(params["head_transfer_priority"], h) if config.transfer_priority
                                else np.zeros((n, A), h.dtype))
    if getattr(config, "moves", False):  # the move head (network.move_logits)
        out["moves"] = move_head(params, h)
    if config.start and starts is not None:  # the start-choice head (network._start_scores)
        out["start_scores"] = _start_scores(config, params, h, batch, np.asarray(starts, np.float32))
    return out
