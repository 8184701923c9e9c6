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

__all__ = ["SHRINK", "init_head", "head_logits", "imitation_targets", "fit_imitation", "Reinforce", "with_head", "HeadRun",
           "MoveCell", "move_cells", "score", "train_move_head"]

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


class HeadRun:
    """A policy object for one flagship run: `start`'s start choice, and the move head's
    proposals (learning or not) from node states computed once per (graph, devices)."""

    def __init__(self, start, head: dict, states: np.ndarray, mix: float, learn: bool = False):
        self.start, self.head, self.states, self.mix, self.learn = start, head, states, mix, learn
        self.moves = None

    def choose_start(self, graph, devices, names, scores) -> int:
        return self.start.choose_start(graph, devices, names, scores)

    def move_proposals(self, graph, devices):
        from regal.moves import MoveProposals
        lg = head_logits(self.head, self.states)
        self.moves = MoveProposals(lg[:, 0], lg[:, 1], self.mix, learn=self.learn, stats=self.learn)
        return self.moves


class MoveCell:
    """One (graph, devices) of the move head's data: the graph, its node states under the start
    policy's network, the no-policy peaks by seed and the per-node counts summed over the seeds;
    rows: {seed: `regal.training.data.moves_row`}."""

    def __init__(self, key: tuple, rows: dict, start):
        from regal.parallel import cached_graph
        from regal.policy.numpy_net import node_states
        self.source, self.split, self.path, self.devices = key
        self.graph = cached_graph(self.path)
        cfg = start.config
        self.states = node_states(cfg, start.params, cfg.batch(self.graph, self.devices))[:self.graph.num_nodes]
        self.none = {s: r["peak_bytes"] for s, r in rows.items()}
        self.stats = sum(np.asarray(r["stats"], dtype=np.float64) for r in rows.values())

    def run(self, start, head: dict, mix: float, seed: int, budget: int = 1000, learn: bool = False):
        """(solution, its MoveProposals): the flagship at `budget` with the head's proposals."""
        from regal.flagship import optimize
        pol = HeadRun(start, head, self.states, mix, learn)
        sol = optimize(self.graph, self.devices, budget=budget, seed=seed, policy=pol)
        return sol, pol.moves


def move_cells(rows: list[dict], start) -> list[MoveCell]:
    """A `MoveCell` per (source, split, path, devices) of collected rows (`regal.training.data.
    moves_row`), in their order."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["source"], r["split"], r["path"], r["devices"]), {})[r["seed"]] = r
    return [MoveCell(k, v, start) for k, v in by.items()]


def score(cells: list[MoveCell], start, head: dict, mix: float, budget: int = 1000) -> float:
    """Mean % lower peak than the no-policy flagship (same budget, same seeds) over the cells."""
    out = []
    for c in cells:
        for seed, none in c.none.items():
            sol, _ = c.run(start, head, mix, seed, budget)
            out.append(100.0 * (none - sol.peak_bytes) / none)
    return float(np.mean(out))


def train_move_head(start, cells: list[MoveCell], imitate: int = 600, imitate_lr: float = 3e-3, steps: int = 4,
                    batch: int = 12, lr: float = 1e-3, mix: float = 0.5, budget: int = 1000, seed: int = 0,
                    log=None, on_step=None) -> tuple[dict, dict, dict]:
    """The move head on `start`'s fixed network: imitation of `cells`' improving picks (`imitate`
    Adam steps, one cell each in turn), then `steps` REINFORCE steps of `batch` flagship runs at
    `budget` each (cells and seeds drawn from `seed`). on_step(step, params), if given, sees the
    imitation head (step 0) and each step's. Returns (imitation head, final head, meta)."""
    import time
    t0 = time.perf_counter()
    head0 = init_head(cells[0].states.shape[1], start.config.hidden, seed=seed)
    imit, curve = fit_imitation(head0, [(c.states, *imitation_targets(c.stats)) for c in cells],
                                steps=imitate, lr=imitate_lr, log=log)
    if on_step:
        on_step(0, imit)
    rl = Reinforce(imit, lr=lr)
    rng = np.random.default_rng(seed)
    head = imit
    for step in range(1, max(steps, 0) + 1):
        runs = []
        for i in rng.choice(len(cells), size=min(batch, len(cells)), replace=False):
            c = cells[i]
            _, moves = c.run(start, rl.numpy_params, mix, int(rng.integers(0, 1000)), budget, learn=True)
            runs.append((c.states, moves.gradient(), float(moves.stats[:, 0].sum())))
        rl.step(runs)
        head = rl.numpy_params
        if log:
            log(f"REINFORCE step {step} ({time.perf_counter() - t0:.0f} s)")
        if on_step:
            on_step(step, head)
    meta = {"training_cells": len(cells), "imitation_steps": imitate, "imitation_lr": imitate_lr,
            "imitation_curve": curve, "reinforce_steps": steps, "batch": batch, "lr": lr, "seed": seed,
            "budget": budget, "seconds": round(time.perf_counter() - t0, 1)}
    return imit, head, meta
