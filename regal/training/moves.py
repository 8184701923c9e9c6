"""Training the move head (issue 47): which node the flagship's climb moves, and whether a device
move takes the node's neighbours along (`regal.moves`).

The head is a small MLP on what every head of the policy reads (`regal.policy.numpy_net.
node_states`: the GNN's node states beside the raw node features), two logits per node. The
network under it is the start-choice policy's and stays fixed: its start choice is unchanged,
and a graph's node states are computed once, so a training step costs the climbs it runs.

Two phases, as regal's prior training (imitation warm start, then REINFORCE):

- **Imitation of the moves that paid.** The flagship is run without a policy (`MoveProposals.
  uniform`: its own draws, counted per node). The target of a node's logit is the log of its
  improvement rate over the run's (improvements / picks, shrunk toward the run's rate by
  `SHRINK` pseudo-picks), of its group logit the log of its grouped device moves' rate over its
  single ones'; squared error weighted by the picks behind each target.
- **REINFORCE**, the climb's improvement per evaluation as the reward: the flagship runs with the
  head's proposals, the kernel sums over its moves (reward 1 if the move improved the score,
  else 0, less the running mean) x d log P(pick) / d logit (`MoveProposals.gradient`), and the
  head ascends it (Adam), per pick.
"""

from __future__ import annotations

import numpy as np

from regal.kernels.climb_picks import (STAT_BETTER, STAT_GROUPED, STAT_GROUPED_BETTER, STAT_PICKS, STAT_SINGLE,
                                       STAT_SINGLE_BETTER)

__all__ = ["SHRINK", "init_head", "head_logits", "imitation_targets", "fit_imitation", "Reinforce", "with_head"]

#: Pseudo-picks at the run's own improvement rate behind each node's imitation target
SHRINK = 5.0
#: Imitation targets are clipped to +- this (log rate ratios)
TARGET_LIMIT = 3.0


def init_head(in_dim: int, hidden: int, seed: int = 0) -> dict:
    """The head's parameters (Haiku's names and initialisers: `regal.policy.network.move_logits`):
    a hidden layer (truncated normal, std 1 / sqrt(in_dim)) and a zero output layer."""
    rng = np.random.default_rng(seed)
    w = np.clip(rng.normal(size=(in_dim, hidden)), -2, 2) / np.sqrt(in_dim)
    return {"moves_hidden": {"w": w.astype(np.float32), "b": np.zeros(hidden, np.float32)},
            "head_moves": {"w": np.zeros((hidden, 2), np.float32), "b": np.zeros(2, np.float32)}}


def head_logits(params: dict, states: np.ndarray) -> np.ndarray:
    """float[n, 2] in NumPy: node and group logits from node states (float[n, F])."""
    from regal.policy.numpy_net import move_head
    return move_head(params, states)


def _jax_logits(params, states):
    """The head in JAX, for its gradients: the policy network's own forward of it
    (`regal.policy.network.move_logits`), transformed by Haiku on its own."""
    import haiku as hk
    from regal.policy.network import move_logits
    hidden = params["moves_hidden"]["w"].shape[1]
    return hk.without_apply_rng(hk.transform(lambda x: move_logits(hidden, x))).apply(params, states)


def imitation_targets(stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(targets float[n, 2], weights float[n, 2]) from a no-policy run's per-node counts
    (`MoveProposals.stats`, summed over seeds): the log improvement-rate ratios described above
    and the picks behind each (0 where a node was never picked)."""
    s = np.asarray(stats, dtype=np.float64)
    picks, better = s[:, STAT_PICKS], s[:, STAT_BETTER]
    rate = better.sum() / max(picks.sum(), 1.0)
    node = np.log((better + SHRINK * rate + 1e-9) / (picks + SHRINK) / (rate + 1e-9))
    g_n, g_b, s_n, s_b = s[:, STAT_GROUPED], s[:, STAT_GROUPED_BETTER], s[:, STAT_SINGLE], s[:, STAT_SINGLE_BETTER]
    g_rate = g_b.sum() / max(g_n.sum(), 1.0)
    s_rate = s_b.sum() / max(s_n.sum(), 1.0)
    grouped = (g_b + SHRINK * g_rate + 1e-9) / (g_n + SHRINK)
    single = (s_b + SHRINK * s_rate + 1e-9) / (s_n + SHRINK)
    group = np.log(grouped / single)
    targets = np.clip(np.stack([node, group], axis=1), -TARGET_LIMIT, TARGET_LIMIT)   # columns LOGIT_NODE, LOGIT_GROUP
    weights = np.stack([picks, np.minimum(g_n, s_n)], axis=1)
    return targets.astype(np.float32), weights.astype(np.float32)


def fit_imitation(params: dict, cells: list, steps: int = 300, lr: float = 3e-3, log=None) -> tuple[dict, list]:
    """Adam on the weighted squared error of the head's logits against the imitation targets,
    one cell per step in turn; cells: (states float[n, F], targets, weights). Returns the
    parameters and the loss curve (mean per 50 steps)."""
    import jax
    import jax.numpy as jnp
    import optax
    opt = optax.adam(lr)
    params = jax.tree_util.tree_map(jnp.asarray, params)
    state = opt.init(params)

    @jax.jit
    def step(params, state, x, t, w):
        def loss(p):
            err = _jax_logits(p, x) - t
            return (w * err * err).sum() / jnp.maximum(w.sum(), 1.0)
        val, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, val

    curve, losses = [], []
    for i in range(steps):
        x, t, w = cells[i % len(cells)]
        params, state, val = step(params, state, jnp.asarray(x), jnp.asarray(t), jnp.asarray(w))
        losses.append(float(val))
        if (i + 1) % 50 == 0:
            curve.append(float(np.mean(losses)))
            losses = []
            if log:
                log(f"imitation step {i + 1}: loss {curve[-1]:.4f}")
    return jax.tree_util.tree_map(np.asarray, params), curve


class Reinforce:
    """REINFORCE on the head: `step(batch)` with batch a list of (states float[n, F], gradient
    float[n, 2] of the moves' advantage-weighted log-probabilities w.r.t. the logits
    (`MoveProposals.gradient`), picks): ascends the sum over the batch divided by its picks (Adam,
    gradient norm clipped at 1)."""

    def __init__(self, params: dict, lr: float = 1e-3):
        import jax
        import jax.numpy as jnp
        import optax
        self.opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.state = self.opt.init(self.params)

        @jax.jit
        def grads(params, x, g):
            return jax.grad(lambda p: -(_jax_logits(p, x) * g).sum())(params)

        @jax.jit
        def apply(params, state, grads):
            updates, state = self.opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        self._grads, self._apply = grads, apply

    def step(self, batch: list) -> None:
        import jax
        import jax.numpy as jnp
        picks = max(sum(p for _, _, p in batch), 1.0)
        total = None
        for x, g, _ in batch:
            gr = self._grads(self.params, jnp.asarray(x), jnp.asarray(g / picks, dtype=jnp.float32))
            total = gr if total is None else jax.tree_util.tree_map(jnp.add, total, gr)
        self.params, self.state = self._apply(self.params, self.state, total)

    @property
    def numpy_params(self) -> dict:
        import jax
        return jax.tree_util.tree_map(np.asarray, self.params)


def with_head(policy, head: dict, mix: float, meta: dict | None = None):
    """A policy (`regal.policy.Policy`) that is `policy` with the move head `head` and its mix:
    the same network and heads, `PolicyConfig.moves` on."""
    from regal.policy.loader import Policy
    params = {**policy.params, **{k: {n: np.asarray(a) for n, a in v.items()} for k, v in head.items()}}
    out_meta = {k: v for k, v in {**policy.meta, **(meta or {})}.items() if k != "moves_mix"}
    out_meta["mix"] = float(mix)
    return Policy(policy.config._replace(moves=True), params, out_meta)
