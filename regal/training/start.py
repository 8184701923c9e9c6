"""Training the start-choice head (issue 34): which start the flagship's climb goes on from.

A contextual bandit, as REGAL's policy is (Paliwal et al., ICLR 2020, 3.3): the context is the
graph and its starts (`regal.policy.start_choice`), the action the start to climb from, the
reward the flagship's peak at a short budget climbing from it. On a training graph every action's
reward is observed (the flagship is run once from each start: `experiments.learned collect`), so
the policy gradient is computed exactly rather than estimated from samples: the loss is the
expected relative cost under the policy's softmax,

    sum_k pi(k | G, starts) * 100 * (outcome_k / min_j outcome_j - 1)  -  entropy_coef * H(pi),

which is REINFORCE's objective with every action enumerated (no sampling noise, no baseline to
learn). Adam; the epoch is chosen by the mean relative cost of the policy's most likely start on
held-out cells (valid splits of the training sources).
"""

from __future__ import annotations

from typing import NamedTuple

import os
import time

import numpy as np

from regal.graph import load

__all__ = ["StartCell", "start_config", "start_cells", "train_start_choice", "choice_cost", "train_start_head"]


class StartCell(NamedTuple):
    """One (graph, devices) of the data: its starts' names and climb scores, and the flagship's
    peak climbing from each start: outcomes float[K], or float[S, K] for S seeds."""
    path: str
    devices: int
    names: list
    scores: list
    outcomes: list

    @property
    def costs(self) -> np.ndarray:
        """float64[K]: each start's outcome over the best outcome, minus 1 (0: the best start),
        the mean over the seeds (each seed against its own best)."""
        out = np.atleast_2d(np.asarray(self.outcomes, dtype=np.float64))
        return (out / out.min(axis=1, keepdims=True) - 1.0).mean(axis=0)

    def default(self) -> int:
        """The start the flagship takes without a policy (the lowest climb score)."""
        return min(range(len(self.scores)), key=lambda i: tuple(self.scores[i]))


def start_config():
    """The start-choice head's network (`PolicyConfig`): a GNN of 3 rounds, width 32, feature set
    v2, every Beta head off."""
    from regal.policy.network import PolicyConfig
    return PolicyConfig(start=True, placement=False, scheduling=False, features="v2", hidden=32, rounds=3)


def start_cells(rows: list[dict], root: str | None = None) -> list[tuple[str, str, StartCell]]:
    """(source, split, StartCell) per (graph, devices) of collected rows (`regal.training.data.
    start_row`), the seeds' outcomes together: seed order, the first seed's starts and scores the
    features, a seed whose starts differ left out. A relative path is taken from `root` (default:
    the working directory)."""
    runs: dict = {}
    for r in rows:
        runs.setdefault((r["path"], r["devices"]), []).append(r)
    out = []
    for (path, d), rs in runs.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        first = rs[0]
        outcomes = [r["outcomes"] for r in rs if r["names"] == first["names"]]
        out.append((first["source"], first["split"],
                    StartCell(os.path.join(root or os.getcwd(), path), d, first["names"], first["scores"], outcomes)))
    return out


def train_start_head(cells: list[StartCell], epochs: int = 16, lr: float = 3e-3, entropy: float = 0.01,
                     seed: int = 0, valid: list[StartCell] | None = None, log=print):
    """A start-choice policy (`start_config`, initialised with `seed`) trained on `cells` for
    `epochs` (`train_start_choice`; with `valid`, the epoch of the lowest valid cost kept), its
    curve and costs in its meta."""
    from regal.policy import init_policy
    t0 = time.perf_counter()
    pol = init_policy(start_config(), seed=seed)
    curve = train_start_choice(pol, cells, epochs=epochs, lr=lr, entropy=entropy, seed=seed, valid=valid,
                               log=log) if epochs > 0 else []
    pol.meta = {"trained": True, "training_cells": len(cells), "epochs": epochs, "lr": lr, "entropy": entropy,
                "seed": seed, "curve": curve, "seconds": round(time.perf_counter() - t0, 1)}
    return pol


def choice_cost(policy, cells: list[StartCell], batches: dict | None = None) -> tuple[float, float]:
    """(policy, default): the mean relative cost (in %) of the policy's choice and of the choice
    without a policy over `cells` (0: always the best start); batches: the cells' features by
    (path, devices), kept across calls."""
    mine, base = [], []
    batches = {} if batches is None else batches
    for c in cells:
        g = load(c.path)
        key = (c.path, c.devices)
        if key not in batches:
            batches[key] = policy.config.batch(g, c.devices)
        k = policy.choose_start(g, c.devices, c.names, c.scores, batch=batches[key])
        mine.append(c.costs[k])
        base.append(c.costs[c.default()])
    return 100 * float(np.mean(mine)), 100 * float(np.mean(base))


def train_start_choice(policy, cells: list[StartCell], epochs: int, lr: float = 3e-3, entropy: float = 0.01,
                       seed: int = 0, valid: list[StartCell] | None = None, log=print):
    """Adam on the expected relative cost (module docstring), one cell per step, `epochs`
    passes; with `valid`, the parameters of the epoch of the lowest valid cost are kept (the
    untrained head, epoch 0, included). Returns the learning curve (a row per epoch)."""
    import jax
    import jax.numpy as jnp
    import optax
    from regal.policy.network import make_network
    from regal.policy.start_choice import MAX_STARTS, padded_start_features
    cfg = policy.config
    assert cfg.start, "the policy has no start head"
    net = make_network(cfg)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))

    def loss(params, batch, feats, costs):
        scores = net.apply(params, None, batch, feats).start_scores
        p = jax.nn.softmax(scores)
        logp = jax.nn.log_softmax(scores)
        real = feats.sum(axis=-1) != 0
        expected = (p * jnp.where(real, costs, 0.0)).sum()
        ent = -(jnp.where(real, p * logp, 0.0)).sum()
        return expected - entropy * ent, expected

    @jax.jit
    def update(params, opt_state, batch, feats, costs):
        (val, expected), grads = jax.value_and_grad(loss, has_aux=True)(params, batch, feats, costs)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, expected

    data = []
    for c in cells:
        k = min(len(c.names), MAX_STARTS)
        if k < 2:
            continue
        feats = padded_start_features(c.names, c.scores)
        costs = np.zeros(MAX_STARTS, np.float32)
        costs[:k] = 100.0 * c.costs[:k]   # in %: gradients of a useful size
        data.append((cfg.batch(load(c.path), c.devices), feats, costs))
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    params, opt_state = policy.params, opt.init(policy.params)
    curve = []
    best = None
    cached: dict = {}
    if valid:
        v, base = choice_cost(policy, valid, cached)
        best = (v, params)
        curve.append({"epoch": 0, "train_expected_cost": float("nan"), "valid_cost": v, "valid_default_cost": base})
        log(f"epoch 0: valid cost {v:.3f} % (no policy: {base:.3f} %)")
    for epoch in range(1, epochs + 1):
        expected = []
        for i in rng.permutation(len(data)):
            batch, feats, costs = data[i]
            params, opt_state, e = update(params, opt_state, batch, feats, costs)
            expected.append(float(e))
        row = {"epoch": epoch, "train_expected_cost": float(np.mean(expected)),
               "seconds": round(time.perf_counter() - t0, 1)}
        if valid:
            policy.params = params
            row["valid_cost"], row["valid_default_cost"] = choice_cost(policy, valid, cached)
            if row["valid_cost"] < best[0]:
                best = (row["valid_cost"], params)
        curve.append(row)
        log(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    policy.params = best[1] if valid else params
    return curve
