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

The parts live in `regal.training`: `config` (`TrainConfig`), `learner` (loss, optimizer,
imitation), `evaluation` (the BRKGA runs and their references), `checkpoint`, `curves`.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import numpy as np

from regal._io import directory_lock
from regal._stop import Deadline, Stopped, expired, interruptible
from regal.graph import load
from regal.policy import Policy, init_policy
from regal.training.checkpoint import (_LEGACY_CHECKPOINT, CHECKPOINT, CheckpointError, ResumeError,  # noqa: F401
                                             _check_setup, _legacy_error, _load_checkpoint, _save_checkpoint,
                                             check_resume, run_setup)
from regal.training.config import TrainConfig, _TrainState
from regal.training.curves import _append_csv, _truncate_csv, plot_curves
from regal.training.evaluation import _priors_arrays, _References, _run_many, evaluate_policy
from regal.training.learner import _actions_of, _Learner, imitate

__all__ = ["TrainConfig", "train", "CheckpointError", "ResumeError"]


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
          client=None, resume: bool = True, log=print, deadline: Deadline | None = None) -> Policy:
    """Train a policy on `train_paths` (graph files); returns the best policy on `valid_paths`.

    One run per directory: `out_dir` is locked while it runs (`regal._io.directory_lock`: a second
    run gets `LockedError` at once; the lock ends with its holder, however it ends). `deadline`
    (the command line's signals): once it expires, the step under way is left behind (its BRKGA
    runs are dropped), the checkpoint of the last finished step is written and that step's policy
    is returned with meta["stopped"]; before there is a step to save (the network's start, the
    imitation warm start) it raises `regal._stop.Stopped`, writing nothing."""
    with directory_lock(out_dir, what="another training run"):
        return _train(train_paths, valid_paths, out_dir, policy_config, tc, client, resume, log, deadline)


def _train(train_paths, valid_paths, out_dir: str, policy_config, tc: TrainConfig, client, resume: bool, log,
           deadline: Deadline | None) -> Policy:
    if tc.objective not in ("memory", "runtime"):
        raise ValueError(f"objective must be 'memory' or 'runtime', got {tc.objective!r}")
    refs = _References(os.path.join(out_dir, "reference.json"), tc.objective)
    from regal.policy.network import PolicyConfig
    policy_config = policy_config or PolicyConfig()
    if policy_config.transfer_priority != (tc.objective == "runtime"):
        raise ValueError("a policy for the runtime objective has the transfer-priority head, one for the memory "
                         f"objective does not (objective {tc.objective!r}, transfer_priority "
                         f"{policy_config.transfer_priority})")
    policy = interruptible(init_policy, deadline, policy_config, seed=tc.seed)  # JAX compiles: seconds
    learner = _Learner(policy, tc)
    rng = np.random.default_rng(tc.seed)
    setup = run_setup(tc, policy.config, train_paths, valid_paths)
    start = (policy, learner, train_paths, out_dir, tc, rng, resume, log, setup)
    # a stop leaves the imitation warm start behind, not the reading of a checkpoint (quick)
    state = _initial_state(*start) if resume and os.path.exists(os.path.join(out_dir, CHECKPOINT)) \
        else interruptible(_initial_state, deadline, *start)
    meta = {"train_config": tc._asdict(), "train_graphs": [os.path.basename(p) for p in train_paths]}
    run = _Run(out_dir, tc, policy.config, meta, refs, client, valid_paths, log)
    t0 = time.time()
    try:
        if state.step == 0 and valid_paths and not np.isfinite(state.best_valid):  # (done: a stop's checkpoint)
            state = interruptible(_validate, deadline, run, state, True)
        while state.step < tc.steps:
            state = _iteration(run, learner, state, train_paths, rng, t0, deadline)
            if state.step % tc.checkpoint_every == 0 or state.step == tc.steps:
                refs.save()
                _save_checkpoint(os.path.join(out_dir, CHECKPOINT), state, rng, setup)
                plot_curves(out_dir)
    except Stopped as e:  # the last finished step's state and rng: a resumed run goes on as if never stopped
        _save_checkpoint(os.path.join(out_dir, CHECKPOINT), state, rng, setup)
        log(f"stopped ({e.reason}) at step {state.step}: {os.path.join(out_dir, CHECKPOINT)} written")
        return Policy(run.cfg, state.params, meta | {"step": state.step, "stopped": e.reason})
    refs.save()
    Policy(run.cfg, state.params, meta | {"step": state.step}).save(os.path.join(out_dir, "last.npz"))
    best_path = os.path.join(out_dir, "best.npz")
    from regal.policy import load_policy
    return load_policy(best_path) if os.path.exists(best_path) else Policy(run.cfg, state.params, meta)


def _iteration(run: _Run, learner: _Learner, state: _TrainState, train_paths, rng: np.random.Generator, t0: float,
               deadline: Deadline | None) -> _TrainState:
    """One step and, when due, a validation. Once `deadline` expires, `Stopped`, with `state` and
    `rng` as they were (the step draws from a copy of `rng`, which it hands back when done)."""
    tc = run.tc
    if expired(deadline):
        raise Stopped(deadline.reason)
    step = state.step
    path = train_paths[state.order[step % len(state.order)]]
    d = tc.devices[step % len(tc.devices)]
    step_rng = np.random.Generator(type(rng.bit_generator)())
    step_rng.bit_generator.state = rng.bit_generator.state
    state, g, rewards, loss, ent = interruptible(_train_step, deadline, run, learner, state, path, d, step_rng)
    _log_step(run, state.step, g, d, rewards, loss, ent, time.time() - t0)
    if run.valid_paths and (state.step % tc.validate_every == 0 or state.step == tc.steps):
        state = interruptible(_validate, deadline, run, state, False)
    rng.bit_generator.state = step_rng.bit_generator.state
    return state


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
