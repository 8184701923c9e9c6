"""The policy's loss and optimizer (REINFORCE with a leave-one-out baseline, entropy bonus,
Adam with clipping) and the imitation warm start; see `regal.training.reinforce`."""

from __future__ import annotations

import numpy as np

from regal.graph import load
from regal.policy import Policy
from regal.policy.actions import Actions
from regal.training.config import TrainConfig


def _log_probs(net, params, batch, acts, num_devices, cfg):
    """log pi(a_j | G) per sample (float32[S]) and the mean per-node entropy of the active heads."""
    import jax
    import jax.numpy as jnp
    lg = net.apply(params, None, batch)
    mask = batch.node_mask.astype(jnp.float32)
    dev_mask = (jnp.arange(cfg.max_devices) < num_devices).astype(jnp.float32)
    logp = jnp.zeros(acts["scheduling"].shape[0])
    ent = 0.0

    def head(logits, a, m):
        """logits [N, ..., A], actions a [S, N, ...], mask m [N, ...] -> (log-prob [S], entropy sum)."""
        lp = jax.nn.log_softmax(logits)
        chosen = jnp.take_along_axis(lp[None], a[..., None], axis=-1)[..., 0]
        h = -(jnp.exp(lp) * lp).sum(-1)
        return (chosen * m[None]).reshape(chosen.shape[0], -1).sum(-1), (h * m).sum()

    if cfg.scheduling:
        lp, h = head(lg.scheduling, acts["scheduling"], mask)
        logp, ent = logp + lp, ent + h
    if cfg.placement:
        lp, h = head(lg.placement, acts["placement"], mask[:, None] * dev_mask[None, :])
        logp, ent = logp + lp, ent + h / jnp.maximum(num_devices, 1)
    if cfg.elite:
        lp, h = head(lg.elite, acts["elite"], mask)
        logp, ent = logp + lp, ent + h
    if cfg.transfer_priority:
        lp, h = head(lg.transfer_priority, acts["transfer_priority"], mask)
        logp, ent = logp + lp, ent + h
    return logp, ent / jnp.maximum(mask.sum(), 1.0)


class _Learner:
    """The jitted pieces: sampling actions and the policy-gradient update."""

    def __init__(self, policy: Policy, tc: TrainConfig):
        import jax
        import optax
        from regal.policy.network import make_network
        self.cfg = policy.config
        self.net = make_network(self.cfg)
        self.opt = optax.chain(optax.clip_by_global_norm(tc.grad_clip), optax.adam(tc.learning_rate))
        cfg, net, S = self.cfg, self.net, tc.samples

        def sample(params, batch, key):
            lg = net.apply(params, None, batch)
            ks = jax.random.split(key, 3)
            acts = {"placement": jax.random.categorical(ks[0], lg.placement, shape=(S,) + lg.placement.shape[:-1]),
                    "scheduling": jax.random.categorical(ks[1], lg.scheduling, shape=(S,) + lg.scheduling.shape[:-1]),
                    "elite": jax.random.categorical(ks[2], lg.elite, shape=(S,) + lg.elite.shape[:-1])}
            if cfg.transfer_priority:  # its own key, so the other heads draw as without it
                acts["transfer_priority"] = jax.random.categorical(
                    jax.random.fold_in(key, 3), lg.transfer_priority, shape=(S,) + lg.transfer_priority.shape[:-1])
            return acts

        def loss(params, batch, acts, adv, num_devices):
            logp, ent = _log_probs(net, params, batch, acts, num_devices, cfg)
            n = batch.node_mask.sum()
            pg = -(adv * logp).mean() / n
            return pg - tc.entropy_coef * ent, (pg, ent)

        def update(params, opt_state, batch, acts, adv, num_devices):
            (val, (pg, ent)), grads = jax.value_and_grad(loss, has_aux=True)(params, batch, acts, adv, num_devices)
            updates, opt_state = self.opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, val, ent

        self.sample = jax.jit(sample)
        self.update = jax.jit(update)


def _actions_of(acts: dict, j: int, n: int, d: int, cfg) -> Actions:
    return Actions(np.asarray(acts["placement"][j])[:n, :d] if cfg.placement else None,
                   np.asarray(acts["scheduling"][j])[:n] if cfg.scheduling else None,
                   np.asarray(acts["elite"][j])[:n] if cfg.elite else None,
                   np.asarray(acts["transfer_priority"][j])[:n] if cfg.transfer_priority else None)


def imitate(policy: Policy, paths, devices, steps: int, lr: float, smoothing: float, seed: int = 0,
            log=print) -> dict:
    """Warm start: `steps` Adam steps of label-smoothed cross-entropy toward `teacher_actions`."""
    import jax
    import jax.numpy as jnp
    import optax
    from regal.policy.network import make_network
    from regal.policy.teacher import teacher_actions
    cfg = policy.config
    net = make_network(cfg)
    opt = optax.adam(lr)

    def loss(params, batch, acts, num_devices):
        lg = net.apply(params, None, batch)
        mask = batch.node_mask.astype(jnp.float32)
        dev_mask = (jnp.arange(cfg.max_devices) < num_devices).astype(jnp.float32)
        total = 0.0

        def xent(logits, a, m):
            k = logits.shape[-1]
            target = jax.nn.one_hot(a, k) * (1 - smoothing) + smoothing / k
            return -(target * jax.nn.log_softmax(logits)).sum(-1) * m

        if cfg.scheduling:
            total += xent(lg.scheduling, acts["scheduling"], mask).sum() / mask.sum()
        if cfg.placement:
            m = mask[:, None] * dev_mask[None, :]
            total += xent(lg.placement, acts["placement"], m).sum() / jnp.maximum(m.sum(), 1.0)
        return total

    @jax.jit
    def update(params, opt_state, batch, acts, num_devices):
        val, grads = jax.value_and_grad(loss)(params, batch, acts, num_devices)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, val

    rng = np.random.default_rng(seed)
    params, opt_state = policy.params, opt.init(policy.params)
    cache = {}
    for step in range(steps):
        path = paths[rng.integers(len(paths))]
        d = devices[step % len(devices)]
        if (path, d) not in cache:
            g = load(path)
            t = teacher_actions(g, d)
            batch = cfg.batch(g, d)
            N = batch.nodes.shape[0]
            place = np.zeros((N, cfg.max_devices), dtype=np.int32)
            place[:g.num_nodes, :d] = t.placement
            sched = np.zeros(N, dtype=np.int32)
            sched[:g.num_nodes] = t.scheduling
            cache[(path, d)] = (batch, {"placement": place, "scheduling": sched})
        batch, acts = cache[(path, d)]
        params, opt_state, val = update(params, opt_state, batch, acts, jnp.asarray(d))
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log(f"imitation step {step + 1}/{steps}: cross-entropy {float(val):.4f}")
    return params
