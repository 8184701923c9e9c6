"""Training REGAL's policy with REINFORCE, as a contextual bandit (Paliwal et al., ICLR 2020, 3.3).

One step = one graph and one device count: the policy reads the graph once, `samples` action
vectors are drawn, each becomes BRKGA priors and one BRKGA run (budget evaluations, a seed from a
small per-graph pool), and its reward is the relative peak reduction over plain BRKGA run on the
same seed (common random numbers; plain runs are cached). With `objective="runtime"` the runs are
BRKGA on the timed chromosome (SPEC.md section 5; no memory limit, the default device model), the
policy has a transfer-priority head, and the reward is the relative makespan reduction. The baseline of each sample is the
mean reward of the others (leave-one-out). The loss per graph is

    -mean_j (r_j - b_j) * log pi(a_j | G) / n  -  entropy_coef * mean-node entropy,

Adam with gradient clipping. BRKGA runs fan out over Dask (`regal.parallel`). Every
`checkpoint_every` steps the full state is saved (`checkpoint.npz`: arrays, and JSON for the rest;
no pickle), so `train(..., resume=True)` continues where a run stopped, with the same numbers as a
run that was never stopped; a checkpoint of another setting (a training field other than `steps`,
`checkpoint_every` and `validate_every`, another policy config, other training or validation
graphs) is refused, naming the field (`ResumeError`). The policy is validated on held-out graphs
every `validate_every` steps (most likely actions, fixed seeds) and the best one is kept
(`best.npz`). Curves go to `train.csv`, `valid.csv` and `curves.png`; on resume their rows after
the checkpoint's step are dropped (they are run again). Every file is written atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from typing import NamedTuple

import numpy as np

from regal._io import atomic_binary, atomic_savefig, atomic_text
from regal.graph import load
from regal.policy import Policy, init_policy
from regal.policy.actions import Actions, to_priors

__all__ = ["TrainConfig", "train", "CheckpointError", "ResumeError"]

CHECKPOINT = "checkpoint.npz"
CHECKPOINT_FORMAT = "regal-checkpoint/1"
_LEGACY_CHECKPOINT = "checkpoint.pkl"  # pickles of older versions: never read (unpickling runs code)
#: TrainConfig fields a resumed run may change: they end or log the run, but do not alter its steps.
RESUMABLE_FIELDS = ("steps", "checkpoint_every", "validate_every")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: cut off, corrupt, of another format or of another network."""


class ResumeError(CheckpointError):
    """A checkpoint written by a run of another setting; `field` names the setting."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


class TrainConfig(NamedTuple):
    devices: tuple = (2,)        # device counts, cycled over steps
    steps: int = 400
    samples: int = 4             # action samples (BRKGA runs) per step
    budget: int = 5000           # BRKGA evaluations per run
    learning_rate: float = 1e-4
    entropy_coef: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    seed_pool: int = 4           # BRKGA seeds per (graph, devices); plain references are cached
    checkpoint_every: int = 20
    validate_every: int = 50
    valid_seeds: int = 2
    imitation_steps: int = 0     # warm start: cross-entropy steps toward the structural teacher
    imitation_smoothing: float = 0.3
    imitation_lr: float = 1e-3
    objective: str = "memory"    # "memory" (peak, SPEC.md section 3) or "runtime" (makespan, section 4)


class _TrainState(NamedTuple):
    params: dict
    opt_state: object
    step: int
    key: object
    best_valid: float
    order: list


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


class _References:
    """Plain-BRKGA peaks (or makespans, objective "runtime") per (graph, devices, seed, budget),
    cached in a JSON file."""

    def __init__(self, path: str, objective: str = "memory"):
        self.path = path
        self.objective = objective
        self.data = {}
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    self.data = json.load(f)
            except (OSError, ValueError, RecursionError) as e:
                raise ValueError(f"{path}: not a readable reference cache ({type(e).__name__}); "
                                 "remove it to run the plain BRKGA references again") from None
            if not isinstance(self.data, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.data.values()):
                raise ValueError(f"{path}: not a reference cache (an object of peaks or makespans); "
                                 "remove it to run the plain BRKGA references again")

    def key(self, gpath, d, seed, budget):
        tail = "|runtime" if self.objective == "runtime" else ""  # the two never share an entry
        return f"{os.path.basename(gpath)}|{d}|{seed}|{budget}{tail}"

    def missing(self, items):
        return [it for it in items if self.key(*it) not in self.data]

    def add(self, item, score):
        self.data[self.key(*item)] = float(score) if self.objective == "runtime" else int(score)

    def get(self, item):
        return self.data[self.key(*item)]

    def save(self):
        with atomic_text(self.path) as f:
            json.dump(self.data, f)


def _run_many(client, jobs, objective: str = "memory"):
    """jobs: list of (path, d, seed, budget, priors_arrays|None) -> peaks (objective "memory") or
    makespans ("runtime"), on Dask or in-process."""
    from regal.policy.rewards import brkga_peak as run_brkga
    jobs = [tuple(j) + (objective,) for j in jobs]
    if client is None:
        return [run_brkga(*j) for j in jobs]
    futures = [client.submit(run_brkga, *j, pure=False) for j in jobs]
    return client.gather(futures)


def _priors_arrays(actions: Actions, n: int, d: int, objective: str = "memory"):
    p = to_priors(actions, n, d, objective)
    return (p.alpha, p.beta, p.elite_inheritance)


def evaluate_policy(policy: Policy, paths, devices, seeds, budget, client, refs: _References) -> list[dict]:
    """Per (graph, devices, seed): plain and policy peaks (or makespans) with the most likely actions."""
    items, jobs = [], []
    for path in paths:
        g = load(path)
        for d in devices:
            pa = _priors_arrays(policy.actions(g, d), g.num_nodes, d, refs.objective)
            for s in seeds:
                items.append((path, d, s, budget))
                jobs.append((path, d, s, budget, pa))
    need = refs.missing(items)
    peaks = _run_many(client, jobs + [it + (None,) for it in need], refs.objective)
    for it, pk in zip(need, peaks[len(jobs):]):
        refs.add(it, pk)
    refs.save()
    return [{"graph": os.path.basename(it[0]), "devices": it[1], "seed": it[2], "plain": refs.get(it),
             "policy": pk, "improvement": (refs.get(it) - pk) / refs.get(it)}
            for it, pk in zip(items, peaks[:len(jobs)])]


class _Run(NamedTuple):
    """What every part of one training run reads: where it writes, its config, its references."""
    out_dir: str
    tc: TrainConfig
    cfg: object          # PolicyConfig
    meta: dict           # provenance saved with every policy file
    refs: _References
    client: object       # Dask client, or None to run BRKGA in-process
    valid_paths: list
    log: object          # callable(str)


def train(train_paths, valid_paths, out_dir: str, policy_config=None, tc: TrainConfig = TrainConfig(),
          client=None, resume: bool = True, log=print) -> Policy:
    """Train a policy on `train_paths` (graph files); returns the best policy on `valid_paths`."""
    os.makedirs(out_dir, exist_ok=True)
    if tc.objective not in ("memory", "runtime"):
        raise ValueError(f"objective must be 'memory' or 'runtime', got {tc.objective!r}")
    refs = _References(os.path.join(out_dir, "reference.json"), tc.objective)
    from regal.policy.network import PolicyConfig
    policy_config = policy_config or PolicyConfig()
    if policy_config.transfer_priority != (tc.objective == "runtime"):
        raise ValueError("a policy for the runtime objective has the transfer-priority head, one for the memory "
                         f"objective does not (objective {tc.objective!r}, transfer_priority "
                         f"{policy_config.transfer_priority})")
    policy = init_policy(policy_config, seed=tc.seed)
    learner = _Learner(policy, tc)
    rng = np.random.default_rng(tc.seed)
    setup = run_setup(tc, policy.config, train_paths, valid_paths)
    state = _initial_state(policy, learner, train_paths, out_dir, tc, rng, resume, log, setup)
    meta = {"train_config": tc._asdict(), "train_graphs": [os.path.basename(p) for p in train_paths]}
    run = _Run(out_dir, tc, policy.config, meta, refs, client, valid_paths, log)
    t0 = time.time()
    if state.step == 0 and valid_paths:
        state = _validate(run, state, first=True)
    while state.step < tc.steps:
        step = state.step
        path = train_paths[state.order[step % len(state.order)]]
        d = tc.devices[step % len(tc.devices)]
        state, g, rewards, loss, ent = _train_step(run, learner, state, path, d, rng)
        _log_step(run, state.step, g, d, rewards, loss, ent, time.time() - t0)
        if valid_paths and (state.step % tc.validate_every == 0 or state.step == tc.steps):
            state = _validate(run, state, first=False)
        if state.step % tc.checkpoint_every == 0 or state.step == tc.steps:
            refs.save()
            _save_checkpoint(os.path.join(out_dir, CHECKPOINT), state, rng, setup)
            plot_curves(out_dir)
    refs.save()
    Policy(run.cfg, state.params, meta | {"step": state.step}).save(os.path.join(out_dir, "last.npz"))
    best_path = os.path.join(out_dir, "best.npz")
    from regal.policy import load_policy
    return load_policy(best_path) if os.path.exists(best_path) else Policy(run.cfg, state.params, meta)


def run_setup(tc: TrainConfig, policy_config, train_paths, valid_paths) -> dict:
    """What a checkpoint must share with the run that resumes it, as JSON values: the training
    config (but `RESUMABLE_FIELDS`), the policy config and the graphs (by file name, in order)."""
    return json.loads(json.dumps({
        "train_config": {k: v for k, v in tc._asdict().items() if k not in RESUMABLE_FIELDS},
        "policy_config": dict(policy_config._asdict()),
        "train_graphs": [os.path.basename(os.fspath(p)) for p in train_paths],
        "valid_graphs": [os.path.basename(os.fspath(p)) for p in valid_paths]}))


def check_resume(out_dir: str, setup: dict) -> None:
    """`ResumeError` naming the first field in which the checkpoint in `out_dir` (if any) differs
    from `setup` (`run_setup`); `CheckpointError` for one that cannot be read. Reads only the
    checkpoint's JSON part: a cheap check before a cluster starts."""
    path = os.path.join(out_dir, CHECKPOINT)
    if os.path.exists(path):
        _check_setup(path, _read_checkpoint(path)[0].get("setup"), setup)
    elif os.path.exists(os.path.join(out_dir, _LEGACY_CHECKPOINT)):
        raise _legacy_error(os.path.join(out_dir, _LEGACY_CHECKPOINT))


def _legacy_error(path: str) -> CheckpointError:
    return CheckpointError(f"{path}: a pickle checkpoint of an older regal, not read (unpickling can run "
                           "code); start the run over")


def _show(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)


def _policy_config_defaults():
    from regal.policy.network import PolicyConfig
    return PolicyConfig()


def _check_setup(path: str, saved, now: dict) -> None:
    """`ResumeError` naming the first field where the checkpoint's setup `saved` differs from `now`."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: no 'setup' object in the checkpoint")
    for group in ("policy_config", "train_config"):
        old = saved.get(group)
        if not isinstance(old, dict):
            raise CheckpointError(f"{path}: no '{group}' object in the checkpoint")
        defaults = (TrainConfig() if group == "train_config" else _policy_config_defaults())._asdict()
        for field, value in now[group].items():
            if field not in old and field in defaults and json.loads(json.dumps(defaults[field])) == value:
                continue  # a field added since, at its default: the run it asks for is the checkpoint's
            if field not in old:
                raise ResumeError(f"{path}: the checkpoint has no {field} (a {group.replace('_', ' ')} field of "
                                  "another version); start the run over", field)
            if old[field] != value or isinstance(old[field], bool) != isinstance(value, bool):
                raise ResumeError(f"{path}: the checkpoint was trained with {field}={_show(old[field])}, this run "
                                  f"asks for {field}={_show(value)}; resume with the same setting or start over",
                                  field)
    for group, what in (("train_graphs", "training"), ("valid_graphs", "validation")):
        old, new = saved.get(group), now[group]
        if not isinstance(old, list):
            raise CheckpointError(f"{path}: no '{group}' list in the checkpoint")
        if old != new:
            gone = [n for n in old if n not in set(new)]
            added = [n for n in new if n not in set(old)]
            how = (f"{gone[0]} is missing" if gone else f"{added[0]} is new" if added else "another order")
            raise ResumeError(f"{path}: the checkpoint was trained with {len(old)} {what} graphs ({group}), this run "
                              f"has {len(new)} ({how}); resume with the same graphs or start over", group)


def _initial_state(policy: Policy, learner: _Learner, train_paths, out_dir: str, tc: TrainConfig,
                   rng: np.random.Generator, resume: bool, log, setup: dict) -> _TrainState:
    """The checkpoint's state (and `rng`'s) when resuming from one, the curves cut back to its
    step; else a fresh start, after the imitation warm start if asked for, with the old curves,
    checkpoint and best policy removed."""
    import jax
    ckpt_path = os.path.join(out_dir, CHECKPOINT)
    if resume and os.path.exists(ckpt_path):
        state = _load_checkpoint(ckpt_path, rng, learner, policy.params, setup, len(train_paths))
        for name in ("train.csv", "valid.csv"):
            _truncate_csv(os.path.join(out_dir, name), state.step)
        log(f"resumed from {ckpt_path} at step {state.step}")
        return state
    if resume and os.path.exists(os.path.join(out_dir, _LEGACY_CHECKPOINT)):
        raise _legacy_error(os.path.join(out_dir, _LEGACY_CHECKPOINT))
    order = list(rng.permutation(len(train_paths)))
    params = policy.params
    if tc.imitation_steps:
        params = imitate(policy, train_paths, tc.devices, tc.imitation_steps, tc.imitation_lr,
                         tc.imitation_smoothing, tc.seed, log)
    state = _TrainState(params, learner.opt.init(params), 0, jax.random.PRNGKey(tc.seed), -np.inf, order)
    for name in ("train.csv", "valid.csv", CHECKPOINT, _LEGACY_CHECKPOINT, "best.npz"):
        if os.path.exists(os.path.join(out_dir, name)):
            os.remove(os.path.join(out_dir, name))
    return state


def _train_step(run: _Run, learner: _Learner, state: _TrainState, path: str, d: int,
                rng: np.random.Generator):
    """One REINFORCE step on one graph: (new state, the graph, rewards in percent, loss, entropy)."""
    import jax
    import jax.numpy as jnp
    tc, cfg, refs = run.tc, run.cfg, run.refs
    g = load(path)
    batch = cfg.batch(g, d)
    key, sub = jax.random.split(state.key)
    acts = learner.sample(state.params, batch, sub)
    seeds = rng.choice(tc.seed_pool, size=tc.samples, replace=tc.samples > tc.seed_pool)
    items = [(path, d, int(s), tc.budget) for s in seeds]
    jobs = [it + (_priors_arrays(_actions_of(acts, j, g.num_nodes, d, cfg), g.num_nodes, d, tc.objective),)
            for j, it in enumerate(items)]
    need = list(dict.fromkeys(refs.missing(items)))
    peaks = _run_many(run.client, jobs + [it + (None,) for it in need], tc.objective)
    for it, pk in zip(need, peaks[len(jobs):]):
        refs.add(it, pk)
    plain = np.array([refs.get(it) for it in items], dtype=np.float64)
    rewards = (plain - np.array(peaks[:len(jobs)], dtype=np.float64)) / plain * 100.0  # percent
    S = len(rewards)
    adv = rewards - (rewards.sum() - rewards) / max(S - 1, 1)
    adv = adv / max(float(rewards.std()), 1.0)  # graphs with a wide reward spread do not dominate
    params, opt_state, loss, ent = learner.update(state.params, state.opt_state, batch, acts,
                                                  jnp.asarray(adv, jnp.float32), jnp.asarray(d))
    state = state._replace(params=params, opt_state=opt_state, step=state.step + 1, key=key)
    return state, g, rewards, loss, ent


def _log_step(run: _Run, step: int, g, d: int, rewards: np.ndarray, loss, ent, seconds: float) -> None:
    """One row of train.csv and one log line for the step that just ended."""
    _append_csv(os.path.join(run.out_dir, "train.csv"), {
        "step": step, "graph": g.name, "nodes": g.num_nodes, "devices": d,
        "mean_reward_pct": round(float(rewards.mean()), 4), "max_reward_pct": round(float(rewards.max()), 4),
        "loss": round(float(loss), 6), "entropy": round(float(ent), 4), "seconds": round(seconds, 1)})
    run.log(f"step {step}/{run.tc.steps} {g.name} d={d}: reward {rewards.mean():+.3f}% "
            f"(max {rewards.max():+.3f}%), entropy {float(ent):.3f}")


def _validate(run: _Run, state: _TrainState, first: bool) -> _TrainState:
    """Validate the current parameters (a row of valid.csv) and keep them in best.npz when they
    beat the best so far; the first validation is always kept."""
    tc = run.tc
    pol = Policy(run.cfg, state.params, run.meta)  # shares compiled code with every earlier Policy
    rows = evaluate_policy(pol, run.valid_paths, tc.devices, range(tc.valid_seeds), tc.budget, run.client,
                           run.refs)
    mean = float(np.mean([r["improvement"] for r in rows])) * 100
    wins = sum(r["policy"] < r["plain"] for r in rows)
    _append_csv(os.path.join(run.out_dir, "valid.csv"), {"step": state.step, "mean_improvement_pct": round(mean, 4),
                                                          "wins": wins, "runs": len(rows)})
    run.log(f"step {state.step}: valid mean improvement {mean:+.3f}% ({wins}/{len(rows)} wins)")
    if first or mean > state.best_valid:
        state = state._replace(best_valid=mean)
        Policy(run.cfg, state.params, run.meta | {"step": state.step, "valid_improvement_pct": mean}).save(
            os.path.join(run.out_dir, "best.npz"))
    return state


def _save_checkpoint(path: str, state: _TrainState, rng: np.random.Generator, setup: dict) -> None:
    """The full training state, written atomically as an .npz without pickles: the parameters
    (`params/MODULE/NAME`), the optimizer state's leaves in `jax.tree_util` order (`opt/I`), the
    PRNG key, and JSON (`__state__`): step, best validation, graph order, `rng`'s state and the
    run's `setup` (`run_setup`)."""
    import jax
    arrays = {f"params/{m}/{k}": np.asarray(v) for m, d in state.params.items() for k, v in d.items()}
    arrays.update({f"opt/{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state.opt_state))})
    arrays["key"] = np.asarray(state.key)
    best = float(state.best_valid)
    doc = {"format": CHECKPOINT_FORMAT, "step": int(state.step), "best_valid": best if math.isfinite(best) else None,
           "order": [int(i) for i in state.order], "rng": rng.bit_generator.state, "setup": setup}
    arrays["__state__"] = np.array(json.dumps(doc))
    with atomic_binary(path) as f:
        np.savez(f, **arrays)


def _read_checkpoint(path: str) -> tuple[dict, dict]:
    """(the JSON state, the arrays) of a checkpoint file; `CheckpointError` for anything that does
    not decode (a cut-off or corrupted file fails the zip's CRC or its structure)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        doc = json.loads(str(arrays.pop("__state__")))
    # whatever a damaged zip or .npy header raises: decoding a file, no other code runs here
    except (Exception, RecursionError) as e:  # noqa: BLE001
        raise CheckpointError(f"{path}: not a readable regal checkpoint ({type(e).__name__}); it may be "
                              "cut off or corrupted") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} file")
    return doc, arrays


def _load_checkpoint(path: str, rng: np.random.Generator, learner: _Learner, params_like: dict, setup: dict,
                     num_train: int) -> _TrainState:
    """The state `_save_checkpoint` wrote, checked against this run (`setup`, the shapes of
    `params_like` and of a fresh optimizer state); `rng` is restored in place."""
    import jax
    import jax.numpy as jnp
    doc, arrays = _read_checkpoint(path)
    _check_setup(path, doc.get("setup"), setup)

    def bad(field, what):
        return CheckpointError(f"{path}: field '{field}' {what}")

    step, order, best = doc.get("step"), doc.get("order"), doc.get("best_valid")
    if type(step) is not int or step < 0:
        raise bad("step", "is not a non-negative integer")
    if (not isinstance(order, list) or not all(type(i) is int for i in order)
            or sorted(order) != list(range(num_train))):
        raise bad("order", f"is not an order of the {num_train} training graphs")
    if best is not None and (type(best) not in (int, float) or not math.isfinite(best)):
        raise bad("best_valid", "is not a finite number or null")

    def like(prefix, got: list, want: list):
        if len(got) != len(want):
            raise bad(prefix, f"has {len(got)} arrays, this network needs {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
                raise bad(prefix, f"array {i} is {a.dtype}{list(a.shape)}, this network needs "
                                  f"{np.asarray(b).dtype}{list(np.shape(b))}")

    params: dict = {}
    for name, a in arrays.items():
        if name.startswith("params/") and "/" in name[7:]:
            module, leaf = name[7:].rsplit("/", 1)
            params.setdefault(module, {})[leaf] = a
    if jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(params_like):
        raise bad("params", "does not hold the parameters of this network")
    like("params", jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(params_like))
    fresh, treedef = jax.tree_util.tree_flatten(learner.opt.init(params_like))
    opt = [arrays.get(f"opt/{i}") for i in range(len(fresh))]
    if any(a is None for a in opt) or sum(n.startswith("opt/") for n in arrays) != len(fresh):
        raise bad("opt", f"does not hold this optimizer's state ({len(fresh)} arrays opt/0, opt/1, ...)")
    like("opt", opt, fresh)
    key = arrays.get("key")
    like("key", [] if key is None else [key], [jax.random.PRNGKey(0)])
    try:
        rng.bit_generator.state = doc.get("rng")
    except (TypeError, ValueError, KeyError, OverflowError):
        raise bad("rng", f"is not a {type(rng.bit_generator).__name__} state") from None
    return _TrainState(jax.tree_util.tree_map(jnp.asarray, params),
                       jax.tree_util.tree_unflatten(treedef, [jnp.asarray(a) for a in opt]), step,
                       jnp.asarray(key), -np.inf if best is None else float(best), order)


def _csv_text(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, newline="", encoding="utf-8") as f:
        return f.read()


def _append_csv(path: str, row: dict) -> None:
    """One more row (a header first in a new file), the whole file rewritten atomically."""
    old = _csv_text(path)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(row))
    if not old:
        w.writeheader()
    w.writerow(row)
    with atomic_text(path) as f:
        f.write(old + buf.getvalue())


def _truncate_csv(path: str, step: int) -> None:
    """Drop the rows of `path` after `step` (written after the checkpoint a run resumes from, and
    run again) and rows that do not parse (a file cut off by an older version)."""
    rows = list(csv.reader(io.StringIO(_csv_text(path))))
    if not rows or "step" not in rows[0]:
        return
    i = rows[0].index("step")
    keep = [r for r in rows[1:] if len(r) == len(rows[0]) and r[i].isdigit() and int(r[i]) <= step]
    if len(keep) < len(rows) - 1:
        buf = io.StringIO()
        csv.writer(buf).writerows([rows[0]] + keep)
        with atomic_text(path) as f:
            f.write(buf.getvalue())


def plot_curves(out_dir: str) -> str | None:
    """curves.png: moving-average training reward and validation improvement against steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tpath, vpath = os.path.join(out_dir, "train.csv"), os.path.join(out_dir, "valid.csv")
    if not os.path.exists(tpath):
        return None
    rows = list(csv.DictReader(io.StringIO(_csv_text(tpath))))
    steps = np.array([int(r["step"]) for r in rows])
    rew = np.array([float(r["mean_reward_pct"]) for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rew, alpha=0.25, color="C0", label="train reward per step")
    w = min(25, len(rew))
    if w > 1:
        ax.plot(steps[w - 1:], np.convolve(rew, np.ones(w) / w, mode="valid"), color="C0",
                label=f"train reward, {w}-step mean")
    if os.path.exists(vpath):
        vr = list(csv.DictReader(io.StringIO(_csv_text(vpath))))
        ax.plot([int(r["step"]) for r in vr], [float(r["mean_improvement_pct"]) for r in vr], "o-",
                color="C3", label="valid improvement (most likely actions)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("step (one graph, one device count)")
    ax.set_ylabel("peak reduction over plain BRKGA (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(out_dir, "curves.png")
    atomic_savefig(fig, out, dpi=110)
    plt.close(fig)
    return out
