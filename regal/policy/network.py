"""The policy networks in Haiku: every `hk.` call of regal lives in this module.

`make_network(config)` returns `hk.Transformed` whose `apply(params, None, batch)` maps a
`features.GraphBatch` to `Logits` over the discrete actions of `regal.policy.actions`:

- "gnn" (REGAL): node and op-type embeddings, then `rounds` of message passing along both edge
  directions (separate message functions for producer->consumer and consumer->producer, each
  gelu(W x_neighbour + U e), mean aggregation, a graph-wide mean as context), each round an
  MLP update that is residual and layer-normalized.
- "gas" (graph-as-sequence, REGAL's GAS baseline): the same embeddings read as a sequence in a
  topological order by a bidirectional GRU; no message passing.

Both end in the same per-node heads, which read the final node state and the raw node features;
with `start` on, a graph-level one more: which of the flagship's starts its climb goes on from
(`regal.policy.start_choice`, `Policy.choose_start`, issue 34); with `moves` on, a per-node
one: the climb's move proposals (`regal.moves`, `Policy.move_proposals`, issue 47). Head biases start at a
preference for action 0 (plain BRKGA's choice; the start-choice head: the flagship's own choice),
so an untrained policy begins near plain BRKGA and learns departures from it.
The functions are pure and jit-able; callers decide where to `jit`.
"""

from __future__ import annotations

from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp

from regal.policy.actions import BETA_ACTIONS, ELITE_ACTIONS
from regal.policy.features import GraphBatch, op_vocab_size
from regal.policy.policy_config import PolicyConfig
from regal.policy.start_choice import DEFAULT_COLUMN, MAX_STARTS, NUM_START_FEATURES

__all__ = ["PolicyConfig", "Logits", "make_network"]


class Logits(NamedTuple):
    placement: jnp.ndarray   # float32[N, max_devices, len(BETA_ACTIONS)]
    scheduling: jnp.ndarray  # float32[N, len(BETA_ACTIONS)]
    elite: jnp.ndarray       # float32[N, len(ELITE_ACTIONS)]
    transfer_priority: jnp.ndarray  # float32[N, len(BETA_ACTIONS)]; zeros without the head
    start_scores: jnp.ndarray = None    # float32[MAX_STARTS]: the start-choice head's scores (None without)
    moves: jnp.ndarray = None           # float32[N, 2]: the move head's node and group logits (None without)


def _mlp(hidden: int, name: str) -> hk.Module:
    return hk.nets.MLP([hidden, hidden], activation=jax.nn.gelu, name=name)


def _encode(batch: GraphBatch, cfg: PolicyConfig) -> jnp.ndarray:
    hidden = cfg.hidden
    x = hk.Linear(hidden, name="node_in")(batch.nodes)
    x = x + hk.Embed(op_vocab_size(cfg.features), hidden, name="op_embed")(batch.op_ids)
    return _mlp(hidden, "encoder")(jax.nn.gelu(x))


def _gnn(batch: GraphBatch, cfg: PolicyConfig) -> jnp.ndarray:
    num_nodes = batch.nodes.shape[0]
    nmask = batch.node_mask[:, None].astype(jnp.float32)
    emask = batch.edge_mask[:, None].astype(jnp.float32)
    snd, rcv = batch.senders, batch.receivers
    deg_in = jnp.maximum(jax.ops.segment_sum(emask, rcv, num_nodes), 1.0)
    deg_out = jnp.maximum(jax.ops.segment_sum(emask, snd, num_nodes), 1.0)
    count = jnp.maximum(nmask.sum(), 1.0)
    x = _encode(batch, cfg) * nmask
    for r in range(cfg.rounds):
        # messages: node transforms are computed once per node, edges only gather and add, so
        # the cost is O(N H^2 + E H) rather than O(E H^2)
        e_fwd = hk.Linear(cfg.hidden, name=f"edge_fwd_{r}")(batch.edges)
        e_bwd = hk.Linear(cfg.hidden, name=f"edge_bwd_{r}")(batch.edges)
        src = hk.Linear(cfg.hidden, with_bias=False, name=f"msg_fwd_{r}")(x)
        dst = hk.Linear(cfg.hidden, with_bias=False, name=f"msg_bwd_{r}")(x)
        m_in = jax.ops.segment_sum(jax.nn.gelu(src[snd] + e_fwd) * emask, rcv, num_nodes) / deg_in
        m_out = jax.ops.segment_sum(jax.nn.gelu(dst[rcv] + e_bwd) * emask, snd, num_nodes) / deg_out
        g = jnp.broadcast_to((x * nmask).sum(axis=0, keepdims=True) / count, x.shape)
        upd = _mlp(cfg.hidden, f"update_{r}")(jnp.concatenate([x, m_in, m_out, g], axis=-1))
        x = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name=f"norm_{r}")(x + upd) * nmask
    return x


def _gas(batch: GraphBatch, cfg: PolicyConfig) -> jnp.ndarray:
    num_nodes = batch.nodes.shape[0]
    x = _encode(batch, cfg)
    n = batch.node_mask.sum()
    pos = jnp.arange(num_nodes)
    fwd_seq = batch.seq_order                                  # real nodes first, padding last
    bwd_seq = batch.seq_order[jnp.where(pos < n, n - 1 - pos, pos)]  # reversed real part, padding last
    outs = []
    for name, seq in (("gru_fwd", fwd_seq), ("gru_bwd", bwd_seq)):
        core = hk.GRU(cfg.hidden, name=name)
        h, _ = hk.dynamic_unroll(core, x[seq], core.initial_state(None))
        outs.append(jnp.zeros_like(h).at[seq].set(h))          # back to node indices
    h = jnp.concatenate([x] + outs, axis=-1)
    return _mlp(cfg.hidden, "seq_out")(h) * batch.node_mask[:, None]


def _start_scores(cfg: PolicyConfig, h: jnp.ndarray, batch: GraphBatch, starts) -> jnp.ndarray:
    """The start-choice head (`regal.policy.start_choice`): one score per start from its
    features and the graph's mean node state; the start the flagship would take without a
    policy gets `default_bias` more, so an untrained head keeps that choice. starts:
    float32[MAX_STARTS, NUM_START_FEATURES] (rows of zeros past the real starts, masked)."""
    mask = batch.node_mask[:, None].astype(jnp.float32)
    pooled = (h * mask).sum(axis=0) / jnp.maximum(mask.sum(), 1.0)
    ctx = jnp.broadcast_to(pooled, (starts.shape[0], pooled.shape[0]))
    hid = jax.nn.gelu(hk.Linear(cfg.hidden, name="start_hidden")(jnp.concatenate([starts, ctx], axis=-1)))
    score = hk.Linear(1, w_init=hk.initializers.Constant(0.0), name="start_score")(hid)[:, 0]
    score = score + cfg.default_bias * starts[:, DEFAULT_COLUMN]
    return jnp.where(starts.sum(axis=-1) != 0, score, -1e9)


def move_logits(hidden: int, h: jnp.ndarray) -> jnp.ndarray:
    """The move head (`regal.moves`, issue 47), Haiku's one forward of it (NumPy's:
    `numpy_net.move_head`; training's: this, transformed, `regal.training.moves`): per node
    (columns `regal.kernels.climb_picks.LOGIT_*`), the logit of picking it for a climb's move
    and the logit of taking its neighbours along on a device move; zero at first (the climb's
    own picks, and an even chance of grouping)."""
    zeros = hk.initializers.Constant(0.0)
    hid = jax.nn.gelu(hk.Linear(hidden, name="moves_hidden")(h))
    return hk.Linear(2, w_init=zeros, b_init=zeros, name="head_moves")(hid)


def make_network(cfg: PolicyConfig) -> hk.Transformed:
    A, B = len(BETA_ACTIONS), len(ELITE_ACTIONS)

    def forward(batch: GraphBatch, starts=None) -> Logits:
        h = _gnn(batch, cfg) if cfg.kind == "gnn" else _gas(batch, cfg)
        # the heads also read the raw node features (a skip connection), so a prior that is a
        # simple function of one feature (e.g. the DFS position) is one linear map away
        h = jnp.concatenate([h, batch.nodes], axis=-1)
        zeros = hk.initializers.Constant(0.0)
        prefer_a = jnp.zeros(A).at[0].set(cfg.default_bias)
        prefer_b = jnp.zeros(B).at[0].set(cfg.default_bias)
        place = hk.Linear(cfg.max_devices * A, w_init=zeros,
                          b_init=hk.initializers.Constant(jnp.tile(prefer_a, cfg.max_devices)),
                          name="head_placement")(h).reshape(h.shape[0], cfg.max_devices, A)
        sched = hk.Linear(A, w_init=zeros, b_init=hk.initializers.Constant(prefer_a),
                          name="head_scheduling")(h)
        elite = hk.Linear(B, w_init=zeros, b_init=hk.initializers.Constant(prefer_b),
                          name="head_elite")(h)
        if cfg.transfer_priority:  # built only when on, so policies without it keep their parameters
            transfer = hk.Linear(A, w_init=zeros, b_init=hk.initializers.Constant(prefer_a),
                                 name="head_transfer_priority")(h)
        else:
            transfer = jnp.zeros((h.shape[0], A))
        if cfg.start and starts is None:  # no starts given: the head runs on none (its parameters exist)
            starts = jnp.zeros((MAX_STARTS, NUM_START_FEATURES), jnp.float32)
        scores = _start_scores(cfg, h, batch, starts) if cfg.start else None
        moves = move_logits(cfg.hidden, h) if cfg.moves else None
        return Logits(place, sched, elite, transfer, scores, moves)

    if cfg.kind not in ("gnn", "gas"):
        raise ValueError(f"unknown policy kind {cfg.kind!r}")
    return hk.transform(forward)
